"""`strom transactions list | describe | producers` against a real broker, with transactions made by
confluent-kafka's transactional producer.

The broker's ``transaction.max.timeout.ms`` is 3 s and its expired-transaction check is effectively
off, so a transaction left open past 3 s stays open: what `list --hanging` exists to find.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from strom.testing import BrokerProcess

from .test_transaction_admin import ghost_transaction
from .test_transactions import create_topic, txn_producer

Strom = Callable[..., subprocess.CompletedProcess[str]]
STROM = [sys.executable, "-m", "strom.cli.main"]
MAX_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {
        "transaction.state.log.num.partitions": "3",
        "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000",
        "transaction.partition.verification.enable": "false",  # ghost_transaction's hanging transaction
    }
    proc = BrokerProcess(tmp_path_factory.mktemp("clitxn") / "data", config)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def strom(broker: BrokerProcess) -> Strom:
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*STROM, "--bootstrap-server", broker.bootstrap, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result

    return run


def table(output: str) -> tuple[list[str], list[list[str]]]:
    header, *rows = output.splitlines()
    return header.split(), [row.split() for row in rows]


def test_list_describe_and_producers(broker: BrokerProcess, strom: Strom) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    tid = f"cli-{uuid.uuid4().hex[:8]}"
    producer = txn_producer(broker.bootstrap, tid, **{"transaction.timeout.ms": MAX_TIMEOUT_MS})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=1)
    assert producer.flush(10) == 0

    header, rows = table(strom("transactions", "list").stdout)
    assert header == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    (row,) = [r for r in rows if r[0] == tid]
    pid = row[2]
    assert row == [tid, "0", pid, "Ongoing"]
    assert tid in [r[0] for r in table(strom("transactions", "list", "--state", "Ongoing").stdout)[1]]
    assert tid not in [r[0] for r in table(strom("transactions", "list", "--state", "Empty").stdout)[1]]
    assert [r[0] for r in table(strom("transactions", "list", "--producer-id", pid).stdout)[1]] == [tid]

    header, (described,) = table(strom("transactions", "describe", tid).stdout)
    assert header[:6] == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS"]
    assert described[:6] == [tid, "0", pid, "0", "Ongoing", str(MAX_TIMEOUT_MS)]
    assert described[-1] == f"{topic}-1"

    header, rows = table(strom("transactions", "producers", topic).stdout)
    assert header[:3] == ["PARTITION", "PRODUCER-ID", "EPOCH"] and header[-2:] == [
        "TXN-START-OFFSET",
        "HANGING",
    ]
    assert [(r[0], r[1], r[-2], r[-1]) for r in rows] == [("1", pid, "0", "no")]  # partition 0: no producer
    assert table(strom("transactions", "producers", topic, "--partition", "0").stdout)[1] == []
    producer.commit_transaction(30)
    (done,) = table(strom("transactions", "describe", tid).stdout)[1]
    assert (done[4], done[7], done[8]) == ("CompleteCommit", "-", "-")  # finished: no duration, no partitions
    (after,) = table(strom("transactions", "producers", topic, "--partition", "1").stdout)[1]
    assert after[-2:] == ["-1", "-"]  # no open transaction


def test_list_hanging(broker: BrokerProcess, strom: Strom) -> None:
    topic = create_topic(broker.bootstrap)
    stuck, fresh = f"stuck-{uuid.uuid4().hex[:8]}", f"fresh-{uuid.uuid4().hex[:8]}"
    for tid in (stuck, fresh):
        producer = txn_producer(broker.bootstrap, tid, **{"transaction.timeout.ms": MAX_TIMEOUT_MS})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, tid.encode())
        assert producer.flush(10) == 0
        if tid == stuck:
            time.sleep(MAX_TIMEOUT_MS / 1000 + 0.5)
    _, rows = table(strom("transactions", "list", "--hanging").stdout)
    hanging = {r[0]: r for r in rows}
    assert stuck in hanging and fresh not in hanging
    assert hanging[stuck][4] == "Ongoing" and int(hanging[stuck][7]) > MAX_TIMEOUT_MS


def test_producers_finds_a_hanging_transaction_and_abort_ends_it(broker: BrokerProcess, strom: Strom) -> None:
    """A transactional batch no coordinator knows of (written with an idempotent producer id, as only a
    broken coordinator or a lost ``__transaction_state`` would leave it) is HANGING once it is older
    than transaction.max.timeout.ms; an equally old transaction its coordinator holds open is not."""
    topic = create_topic(broker.bootstrap)
    tid = f"known-{uuid.uuid4().hex[:8]}"
    known = txn_producer(broker.bootstrap, tid, **{"transaction.timeout.ms": MAX_TIMEOUT_MS})
    known.init_transactions(30)
    known.begin_transaction()
    known.produce(topic, b"known")
    assert known.flush(10) == 0
    ghost_pid, _ = ghost_transaction(broker.bootstrap, topic)
    rows = table(strom("transactions", "producers", topic).stdout)[1]
    assert sorted(r[-1] for r in rows) == ["no", "no"]  # both younger than the maximum timeout
    time.sleep(MAX_TIMEOUT_MS / 1000 + 0.5)
    rows = table(strom("transactions", "producers", topic).stdout)[1]
    assert {r[1]: r[-1] for r in rows} == {str(ghost_pid): "yes", _pid_of(strom, tid): "no"}
    ghost_start = next(r[-2] for r in rows if r[1] == str(ghost_pid))
    assert ghost_start == "1"  # after the known producer's record
    aborted = strom("transactions", "abort", topic, "--partition", "0", "--start-offset", "1")
    assert aborted.stdout == (
        f"Aborted the transaction of producer {ghost_pid} (epoch 0) that started at offset 1 of {topic}-0.\n"
    )
    rows = table(strom("transactions", "producers", topic).stdout)[1]
    assert {r[1]: r[-1] for r in rows} == {str(ghost_pid): "-", _pid_of(strom, tid): "no"}
    again = strom("transactions", "abort", topic, "--partition", "0", "--start-offset", "1", check=False)
    assert (again.returncode, again.stderr) == (
        1,
        f"strom: error: no open transaction starts at offset 1 of {topic}-0\n",
    )
    known.abort_transaction(30)


def _pid_of(strom: Strom, tid: str) -> str:
    return table(strom("transactions", "describe", tid).stdout)[1][0][2]


def test_errors_are_one_line(strom: Strom) -> None:
    unknown = strom("transactions", "describe", "no-such-id", check=False)
    assert unknown.returncode == 1
    assert unknown.stderr == "strom: error: transactional id 'no-such-id' is not known to its coordinator\n"
    no_topic = strom("transactions", "producers", "no-such-topic", check=False)
    assert (no_topic.returncode, no_topic.stderr) == (
        1,
        "strom: error: topic 'no-such-topic' does not exist\n",
    )
    config = strom("transactions", "list", "--command-config", "debug=all", check=False)
    assert config.returncode == 1 and config.stderr.count("\n") == 1
    assert config.stderr.startswith("strom: error: --command-config debug: not supported")
    down = subprocess.run(
        [*STROM, "--bootstrap-server", "127.0.0.1:1", "--request-timeout-s", "2", "transactions", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert down.returncode == 1
    assert down.stderr.startswith("strom: error: no broker reachable at 127.0.0.1:1")
    assert down.stderr.count("\n") == 1
