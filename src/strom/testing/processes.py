"""Stopping a process that tests and benchmarks started: SIGTERM first (a broker's clean shutdown, a JVM's
shutdown hooks), then SIGKILL if it has not exited in time, and always reaped. And the CPU time such a
process has used, from Linux's /proc."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = 20.0, kill_wait_s: float = 10.0) -> int:
    """SIGTERM, up to ``timeout_s`` for the process to exit, then SIGKILL; returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(kill_wait_s)


def process_cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds the running process ``pid`` has used, all threads (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks
