"""`strom topics create` with many names: batched CreateTopics, progress on a terminal, quiet in a pipe,
every per-topic failure reported (exit 1) while the other topics are still created."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from strom.testing import BrokerProcess
from tests.integration.test_cli_progress import run_on_terminal

STROM = [sys.executable, "-m", "strom.cli.main"]


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_many_topics_with_progress_on_a_terminal(tmp_path: Path, broker: BrokerProcess) -> None:
    prefix = f"many-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:03d}" for i in range(250)]
    listing = tmp_path / "topics.txt"
    # Two names on the command line, the rest from the file (with a comment, a blank line, a duplicate).
    listing.write_text("# topics for the test\n\n" + "\n".join(names[2:]) + f"\n{names[5]}\n")
    create = [*STROM, "--bootstrap-server", broker.bootstrap, "topics", "create", *names[:2]]
    code, out, drawn = run_on_terminal(
        [*create, "--from-file", str(listing), "--partitions", "1", "--batch-size", "100"]
    )
    assert code == 0, drawn
    assert out.decode().splitlines() == [f"Created topic {name}." for name in names]
    assert "Creating topics" in drawn and "250/250" in drawn
    assert set(names) <= _topics(broker.bootstrap)


def test_many_topics_piped_report_each_failure(broker: BrokerProcess) -> None:
    prefix = f"piped-{uuid.uuid4().hex[:6]}"
    existing = [f"{prefix}-old-{i}" for i in range(3)]
    fresh = [f"{prefix}-new-{i}" for i in range(4)]
    create = [*STROM, "--bootstrap-server", broker.bootstrap, "topics", "create"]
    first = subprocess.run([*create, *existing], capture_output=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().splitlines() == [f"Created topic {name}." for name in existing]

    # Names from stdin and the command line, mixed; batches of 2 so failures and successes share batches.
    result = subprocess.run(
        [*create, fresh[0], "--from-file", "-", "--batch-size", "2", "--config", "retention.ms=60000"],
        input="\n".join([existing[0], *fresh[1:], *existing[1:]]).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert result.stdout.decode().splitlines() == [f"Created topic {name}." for name in fresh]
    lines = stderr.splitlines()
    assert [line.split("'")[1] for line in lines[:-1]] == existing
    assert all(line.startswith("cannot create topic") and "already exists" in line for line in lines[:-1])
    assert lines[-1] == "strom: error: 3 of 7 topics were not created"
    assert "Creating" not in stderr and "\x1b[" not in stderr  # no progress in a pipe
    assert set(fresh) <= _topics(broker.bootstrap)


def test_names_file_errors_are_one_line(tmp_path: Path, broker: BrokerProcess) -> None:
    create = [*STROM, "--bootstrap-server", broker.bootstrap, "topics", "create"]
    missing = subprocess.run(
        [*create, "--from-file", str(tmp_path / "absent.txt")], capture_output=True, timeout=60, check=False
    )
    assert (missing.returncode, missing.stderr.decode()) == (
        1,
        f"strom: error: cannot read {tmp_path / 'absent.txt'}: No such file or directory\n",
    )
    empty = subprocess.run(
        [*create, "--from-file", "-"], input=b"# nothing\n\n", capture_output=True, timeout=60, check=False
    )
    assert (empty.returncode, empty.stderr.decode()) == (1, "strom: error: no topic names in -\n")
