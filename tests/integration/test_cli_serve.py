"""`strom serve` starts a broker that the other `strom` commands can use, and stops on SIGINT/SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

STROM = [sys.executable, "-m", "strom.cli.main"]


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_serve_then_use_then_stop(tmp_path: Path, stop_signal: signal.Signals) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\nnum.partitions=2\n")
    serve = subprocess.Popen(
        [
            *STROM,
            "serve",
            "--config",
            str(config),
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "--set",
            "http.listeners=http://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert serve.stdout is not None
        http = re.search(r"HTTP on (http://\S+)", serve.stdout.readline())
        assert http, "strom serve did not report its HTTP listener"
        match = re.search(r"listening on (\S+:\d+)", serve.stdout.readline())
        assert match, "strom serve did not report its listener"
        bootstrap = match.group(1)
        created = subprocess.run(
            [*STROM, "--bootstrap-server", bootstrap, "topics", "create", "served"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert created.returncode == 0, created.stderr
        described = subprocess.run(
            [*STROM, "--bootstrap-server", bootstrap, "topics", "describe", "served"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        # num.partitions from the --config file is the broker default used by `topics create`.
        assert described.stdout.startswith(b"Topic: served\tPartitionCount: 2\t")
    finally:
        serve.send_signal(stop_signal)
        status = serve.wait(timeout=30)
    assert status == 0
