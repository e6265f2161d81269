"""The backlog controller with a real broker process over TCP (strom.broker.lake.backlog): rounds go
to worker processes of the idle scheduling class while the translation lag is within
``strom.iceberg.translation.backlog.ms``, and the table gets every record once produce pauses (on a
quiet machine in the idle share; on a busy one, where idle processes may get no CPU, raised once the
lag passes the bound); past the bound (here 1 ms: any lag is past it) the rounds run in worker
processes at an ordinary priority, and the table passes records produced after the share was raised
while produce goes on, every record once."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyiceberg.exceptions import NoSuchTableError

from strom.lake.tables import recorded_offsets
from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value
from strom.testing.processes import child_pids
from tests.integration.iceberg_readers import sql_catalog_table
from tests.integration.test_iceberg_topics import table_rows, wait_until

TOPIC = "events"
IDLE, RAISED = "strom_iceberg_translation_idle_rounds_total", "strom_iceberg_translation_raised_rounds_total"


def _broker(tmp_path: Path, backlog_ms: str) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path / "data",
        {"strom.iceberg.translation.interval.ms": "100", "strom.iceberg.translation.backlog.ms": backlog_ms},
    )
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        configs = {"strom.iceberg.mode": "key_value", "strom.iceberg.target.lag.ms": "200"}
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
            future.result(30)
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def patient(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Translation stays idle for up to 3 s of lag."""
    yield from _broker(tmp_path, "3000")


@pytest.fixture
def impatient(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Translation is raised as soon as any record waits."""
    yield from _broker(tmp_path, "1")


def _rounds(broker: BrokerProcess) -> tuple[float, float]:
    """Partition 0's rounds that ended idle, and raised."""
    assert broker.http_url is not None
    samples = scrape(broker.http_url)
    labels = {"topic": TOPIC, "partition": "0"}
    return value(samples, IDLE, **labels), value(samples, RAISED, **labels)


def _workers(broker: BrokerProcess) -> list[tuple[int, int]]:
    """The broker's child processes: scheduling policy and niceness of each."""
    assert broker.proc is not None
    found = []
    for pid in child_pids(broker.proc.pid):
        try:
            found.append((os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid)))
        except ProcessLookupError:
            continue
    return found


def _next_offset(broker: BrokerProcess) -> int:
    try:
        return recorded_offsets(sql_catalog_table(str(broker.data_dir / "logs"), TOPIC)).get(0, 0)
    except NoSuchTableError:  # not yet
        return 0


def _offsets_in_table(broker: BrokerProcess) -> list[int]:
    """The offsets of the table's rows (a record twice would be there twice)."""
    return sorted(int(offset) for _, offset in table_rows(broker, TOPIC, []))


def test_idle_rounds_finish_when_produce_pauses(patient: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": patient.bootstrap, "enable.idempotence": True})
    for i in range(2_000):
        producer.produce(TOPIC, value=f"v{i}".encode())
    assert producer.flush(60) == 0
    wait_until(lambda: _next_offset(patient) == 2_000, 300, "every record in the table")
    assert _offsets_in_table(patient) == list(range(2_000))
    # The worker commits the table before the broker counts its round: wait for the count.
    wait_until(lambda: sum(_rounds(patient)) >= 1, 60, "a round counted")
    assert any(policy == os.SCHED_IDLE for policy, _ in _workers(patient))


def test_past_the_bound_translation_catches_up_while_produce_goes_on(impatient: BrokerProcess) -> None:
    stop = threading.Event()
    delivered: list[int] = []  # offsets, as the broker acknowledged them
    errors: list[str] = []

    def acknowledged(error: object, message: Message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            delivered.append(message.offset())

    def produce() -> None:
        producer = Producer({"bootstrap.servers": impatient.bootstrap, "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            producer.produce(TOPIC, value=f"v{i}".encode(), on_delivery=acknowledged)
            i += 1
            producer.poll(0.001)
        producer.flush(60)

    producing = threading.Thread(target=produce)
    producing.start()
    try:
        wait_until(lambda: _rounds(impatient)[1] >= 1, 300, "a round in the raised share")
        wait_until(lambda: len(delivered) > 0, 60, "a record acknowledged")
        mark = max(delivered)
        # The table passes a record acknowledged after the share was raised, while produce goes on.
        wait_until(lambda: _next_offset(impatient) > mark, 300, "the table past the mark")
        passed = _next_offset(impatient)
        wait_until(lambda: max(delivered) > passed, 60, "produce going on past the table")
    finally:
        stop.set()
        producing.join(120)
    assert not errors
    produced = max(delivered) + 1
    assert sorted(delivered) == list(range(produced))
    wait_until(lambda: _next_offset(impatient) == produced, 300, "every record in the table")
    assert _offsets_in_table(impatient) == list(range(produced))
    wait_until(lambda: _rounds(impatient)[1] >= 2, 60, "two raised rounds counted")
    assert impatient.proc is not None
    broker_niceness = os.getpriority(os.PRIO_PROCESS, impatient.proc.pid)
    workers = _workers(impatient)
    assert any(policy == os.SCHED_OTHER and niceness >= broker_niceness + 10 for policy, niceness in workers)
