"""`strom zookeeper` runs ZooKeeper in the foreground and stops it when it is itself stopped: by SIGTERM
(`kill`, `timeout`) too, not only Ctrl-C, since ZooKeeper's JVM runs in its own session."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_stopping_strom_zookeeper_stops_zookeeper(tmp_path: Path, stop_signal: signal.Signals) -> None:
    require_zookeeper()
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    zk = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "zookeeper",
            "--dir",
            str(tmp_path / "zk"),
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert zk.stdout is not None
        assert zk.stdout.readline().strip() == f"ZooKeeper listening on 127.0.0.1:{port}"
        assert _accepts(port)
        zk.send_signal(stop_signal)
        assert zk.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while _accepts(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _accepts(port), "ZooKeeper outlived 'strom zookeeper'"
    finally:
        if zk.poll() is None:
            zk.kill()
