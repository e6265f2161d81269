"""`strom.testing.processes.popen_tied`: a process a test run started dies with the test run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = r"""
import sys, threading
from strom.testing.processes import popen_tied
main = popen_tied(["sleep", "60"])
untied = []
thread = threading.Thread(target=lambda: untied.append(popen_tied(["sleep", "60"])))
thread.start()
thread.join()
print(main.pid, untied[0].pid, flush=True)
sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def test_a_tied_process_dies_with_its_parent_and_one_from_a_thread_does_not() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    tied, untied = (int(pid) for pid in parent.stdout.readline().split())
    try:
        assert _alive(tied) and _alive(untied)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert _wait_gone(tied, 10)
        # Started from a thread that has ended: tying it would have killed it with the thread.
        assert _alive(untied)
    finally:
        for pid in (tied, untied):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_thread_cpu_seconds_gives_each_thread_its_own_cpu_time() -> None:
    import threading

    from strom.testing.processes import process_cpu_times, thread_cpu_seconds

    ids: list[int] = []
    done = threading.Event()

    def spin() -> None:
        ids.append(threading.get_native_id())
        end = time.thread_time() + 0.3  # CPU time, not wall time: the machine may be loaded
        while time.thread_time() < end:
            pass
        done.wait(30)

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        while not ids or thread_cpu_seconds(os.getpid()).get(ids[0], 0.0) < 0.25:
            time.sleep(0.05)
        threads = thread_cpu_seconds(os.getpid())
        assert os.getpid() in threads  # the main thread's id is the process's
        assert 0.25 <= threads[ids[0]] <= sum(process_cpu_times(os.getpid()))  # a part of the whole
    finally:
        done.set()
        spinner.join()
