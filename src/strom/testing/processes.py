"""Starting and stopping a process that tests and benchmarks run.

Started (`popen_tied`) in a session of its own, so that a signal meant for the test run (Ctrl-C) does
not reach it, and tied to the test run's life: Linux's parent-death signal, set by util-linux's
``setpriv --pdeathsig KILL`` before it executes the command (the signal survives the exec), kills it if
the process that started it dies first, so a test run killed outright (a CI timeout, SIGKILL) leaves no
broker, ZooKeeper or S3 server behind. The kernel ties the child to the *thread* that forked it, so the
tie is made only from the main thread (a process started from a short-lived worker thread would die
with the thread); elsewhere, or without ``setpriv``, the process is untied and stopped by PID as always.
A server meant to outlive its starter (``strom cluster up`` leaves its cluster running) is started
untied (``detached`` on the process classes).

Stopped (`stop_process`): SIGTERM first (a broker's clean shutdown, a JVM's shutdown hooks), then
SIGKILL if it has not exited in time, and always reaped. And the CPU time such a process has used, from
Linux's /proc.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Sequence
from typing import Any


def _tie_to_parent() -> list[str]:
    """The command prefix that sets SIGKILL as the parent-death signal; empty where it cannot be tied."""
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


def popen_tied(args: Sequence[str], tied: bool = True, **kwargs: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen` in a new session, killed if this process dies before stopping it (unless not
    ``tied``: a server meant to outlive the command that started it, as ``strom cluster up``'s)."""
    return subprocess.Popen([*(_tie_to_parent() if tied else []), *args], start_new_session=True, **kwargs)


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
    return _stat_cpu_times(f"/proc/{pid}/stat")


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) each thread of the running process ``pid`` has used, by thread id
    (the main thread's id is ``pid``); threads that ended meanwhile are left out."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            user, system = _stat_cpu_times(f"/proc/{pid}/task/{tid}/stat")
        except FileNotFoundError:
            continue
        out[int(tid)] = user + system
    return out


def child_pids(pid: int) -> list[int]:
    """The running child processes of ``pid``, started by any of its threads (Linux /proc)."""
    found: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            continue
    return found


def _stat_cpu_times(path: str) -> tuple[float, float]:
    with open(path) as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks
