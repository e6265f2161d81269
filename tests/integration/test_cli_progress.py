"""Progress on a terminal, silence in a pipe: `strom produce` of a large file and `strom consume
--max-messages N` run with standard error on a pseudo-terminal (progress drawn there) and on a pipe
(nothing but what the command says anyway); standard output carries the records either way."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from strom.testing import BrokerProcess

STROM = [sys.executable, "-m", "strom.cli.main"]


def run_on_terminal(args: list[str], stdin_path: Path | None = None) -> tuple[int, bytes, str]:
    """(exit code, stdout, what was drawn on the terminal that was standard error)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "STROM_PROGRESS"}
    # Standard output to a file: a pipe nobody reads while we read the terminal would fill and block.
    with open(stdin_path or os.devnull, "rb") as stdin, tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen(args, stdin=stdin, stdout=stdout, stderr=slave, env=env)
        os.close(slave)
        drawn = _read_terminal(master, proc)
        code = proc.wait(timeout=60)
        stdout.seek(0)
        return code, stdout.read(), drawn


def _read_terminal(master: int, proc: subprocess.Popen[bytes]) -> str:
    drawn = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return drawn.decode(errors="replace")


def test_progress_on_a_terminal_and_quiet_in_a_pipe(tmp_path: Path, broker: BrokerProcess) -> None:
    topic = f"progress-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [*STROM, "--bootstrap-server", broker.bootstrap, "topics", "create", topic, "--partitions", "1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    big = tmp_path / "records.txt"
    big.write_bytes(b"".join(b"record-%06d %s\n" % (i, b"x" * 100) for i in range(20_000)))

    code, _, drawn = run_on_terminal([*STROM, "--bootstrap-server", broker.bootstrap, "produce", topic], big)
    assert code == 0
    assert f"Producing to {topic}" in drawn or f"Flushing to {topic}" in drawn
    assert "MB" in drawn  # bytes of the input file, with its size

    consume = [*STROM, "--bootstrap-server", broker.bootstrap, "consume", topic, "--from-beginning"]
    code, out, drawn = run_on_terminal([*consume, "--max-messages", "5000"])
    assert code == 0
    assert out.count(b"\n") == 5000 and out.startswith(b"record-000000 ")
    assert f"Consuming {topic}" in drawn and "5000/5000" in drawn

    piped = subprocess.run([*consume, "--max-messages", "5000"], capture_output=True, timeout=120, check=True)
    assert piped.stdout == out
    assert b"Consuming" not in piped.stderr and b"\x1b[" not in piped.stderr
