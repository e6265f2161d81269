"""Stopping a process that tests and benchmarks started: SIGTERM first (a broker's clean shutdown, a JVM's
shutdown hooks), then SIGKILL if it has not exited in time, and always reaped."""

from __future__ import annotations

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
