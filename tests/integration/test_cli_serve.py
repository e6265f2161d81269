"""`strom serve` starts a broker that the other `strom` commands can use, and stops on SIGINT/SIGTERM."""

from __future__ import annotations

import re
import signal
import socket
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


def _serve(data: Path, listener: str = "PLAINTEXT://127.0.0.1:0") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *STROM,
            "serve",
            "--set",
            f"log.dirs={data}",
            "--set",
            f"listeners={listener}",
            "--set",
            "http.listeners=http://127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_second_broker_on_the_same_log_dir_is_refused_and_the_first_keeps_serving(tmp_path: Path) -> None:
    first = _serve(tmp_path / "data")
    try:
        assert first.stdout is not None
        first.stdout.readline()  # HTTP on ...
        match = re.search(r"listening on (\S+:\d+)", first.stdout.readline())
        assert match, "strom serve did not report its listener"
        second = _serve(tmp_path / "data")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        assert "is in use by another broker process" in err and "--set log.dirs=DIR" in err, err
        created = subprocess.run(
            [*STROM, "--bootstrap-server", match.group(1), "topics", "create", "still-served"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert created.returncode == 0, created.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0


def test_a_taken_port_names_the_fix(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = _serve(tmp_path / "data", f"PLAINTEXT://127.0.0.1:{port}")
        _, err = serve.communicate(timeout=60)
    assert serve.returncode == 1
    assert "address already in use" in err and "--set listeners=PLAINTEXT://127.0.0.1:9093" in err, err
