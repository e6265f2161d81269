"""An fsync the disk refuses with EIO, under a single broker with two log dirs (KIP-112) or one, driven
with real clients over TCP.

The broker process runs with the test-only fault of the file-system port (`strom._util.fsync_faults`):
once the test writes the switch file, every fsync under the second log dir fails with EIO, as a failed
device's does. The next produce there needs a new segment, whose roll fsyncs the old one: the produce is
answered KAFKA_STORAGE_ERROR (a producer that does not retry sees it), and the dir goes offline, as
Kafka's log dir failure channel takes it (DescribeLogDirs reports it failed) while the other dir keeps
serving produces and DeleteRecords. Nothing acknowledged is lost: after a restart with the disk healthy,
the partition holds exactly the records that were acknowledged, in order. With no client writing, the
periodic checkpoint's fsync meets the fault and takes the dir offline the same way. With a single log
dir the failed fsync is never retried: the broker process logs one fatal line and exits with code 1 at
once, without a clean-shutdown marker, and its restart with the fault off recovers exactly the
acknowledged records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom._util.fsync_faults import SWITCH_ENV
from strom.protocol.errors import ErrorCode
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE
from strom.testing import BrokerProcess
from tests.cluster.conftest import wait_until
from tests.cluster.jbod import dir_error, two_dirs
from tests.integration.test_log_dir_failure_requests import FAILING, _produce, _serves_the_healthy_dir, _topic

TOPIC = "synced"
CHECKPOINT_MS = "log.flush.offset.checkpoint.interval.ms"
Start = Callable[[dict[str, str]], BrokerProcess]


@pytest.fixture
def start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Start]:
    """Starts the test's broker (two log dirs, the fault's switch file named in its environment)."""
    monkeypatch.setenv(SWITCH_ENV, str(tmp_path / "fsync-eio"))  # inherited by the broker process
    started: list[BrokerProcess] = []

    def starting(settings: dict[str, str]) -> BrokerProcess:
        proc = two_dirs(0, tmp_path / "data", settings)
        started.append(proc)
        proc.start()
        return proc

    try:
        yield starting
    finally:
        for proc in started:
            proc.stop()


def _produce_until_refused(bootstrap: str, limit: int) -> tuple[list[bytes], KafkaError | None]:
    """One record at a time to the failing partition, without retries: the values acknowledged, and the
    first refusal (or failure to deliver)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "batch.num.messages": 1, "retries": 0, "message.timeout.ms": 20000}
    )
    acked: list[bytes] = []
    refused: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            refused.append(err)
        else:
            acked.append(msg.value() or b"")

    for i in range(limit):
        producer.produce(
            TOPIC, f"after-{i:03d}".encode().ljust(100, b"."), partition=FAILING, on_delivery=delivered
        )
        assert producer.flush(30) == 0
        if refused:
            break
    return acked, (refused[0] if refused else None)


def _read_all(bootstrap: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fsync-check", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, FAILING), timeout=30)
        consumer.assign([TopicPartition(TOPIC, FAILING, low)])
        values: list[bytes] = []
        while len(values) < high - low:
            msg = consumer.poll(30)
            assert msg is not None, f"read {len(values)} of {high - low}"
            assert msg.error() is None, msg.error()
            values.append(msg.value() or b"")
        return values
    finally:
        consumer.close()


def _restarted_healthy_holds(broker: BrokerProcess, switch: Path, acknowledged: list[bytes]) -> None:
    """Once the broker restarts with the fault off, the failing partition holds exactly these records."""
    broker.stop()
    switch.unlink()
    broker.start()
    failing_dir = broker.data_dir / "logs-b"
    wait_until(
        lambda: dir_error(broker.bootstrap, 0, failing_dir) == ErrorCode.NONE, 30, "the dir back online"
    )
    assert _read_all(broker.bootstrap) == acknowledged


BEFORE = [b"x" * 100] * 40  # what _topic writes to each partition


def test_an_fsync_refused_with_eio_takes_the_dir_offline_and_loses_nothing_acknowledged(
    start: Start, tmp_path: Path
) -> None:
    # No periodic checkpoint in the failing dir during the test: the produce is what meets the fault.
    broker = start({CHECKPOINT_MS: "3600000"})
    admin = _topic(broker, TOPIC)  # 40 records in each partition, 1000-byte segments
    switch = tmp_path / "fsync-eio"
    switch.write_text(str(broker.data_dir / "logs-b"))
    acked, refused = _produce_until_refused(broker.bootstrap, 30)  # a roll every few records
    assert refused is not None and refused.code() == KafkaError.KAFKA_STORAGE_ERROR, (len(acked), refused)
    _serves_the_healthy_dir(broker, admin, TOPIC)
    _restarted_healthy_holds(broker, switch, BEFORE + acked)


def test_a_checkpoint_fsync_refused_with_eio_takes_the_dir_offline(start: Start, tmp_path: Path) -> None:
    """No client writes: the periodic checkpoint (recovery points, log start offsets, high watermarks)
    is what meets the fault."""
    broker = start({CHECKPOINT_MS: "300"})
    admin = _topic(broker, TOPIC)
    switch = tmp_path / "fsync-eio"
    failing_dir = broker.data_dir / "logs-b"
    switch.write_text(str(failing_dir))
    _serves_the_healthy_dir(broker, admin, TOPIC)  # waits for DescribeLogDirs to report it failed
    assert f"writing the checkpoints of {failing_dir} failed" in broker.log_path.read_text()
    _restarted_healthy_holds(broker, switch, BEFORE)


def test_a_single_dir_whose_fsync_fails_halts_the_broker_and_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    switch = tmp_path / "fsync-eio"
    monkeypatch.setenv(SWITCH_ENV, str(switch))  # inherited by the broker process
    broker = BrokerProcess(tmp_path / "data", {CHECKPOINT_MS: "3600000"})
    log_dir = broker.data_dir / "logs"
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1, config={"segment.bytes": "1000"})])[TOPIC].result(30)
        _produce(broker, TOPIC, FAILING, len(BEFORE))
        switch.write_text(str(log_dir))
        acked, refused = _produce_until_refused(broker.bootstrap, 30)  # a roll every few records
        assert refused is not None, len(acked)
        proc = broker.proc
        assert proc is not None
        assert proc.wait(60) == 1  # at once: no shutdown runs
        fatal = [line for line in broker.log_path.read_text().splitlines() if "halting the broker" in line]
        assert len(fatal) == 1 and str(log_dir) in fatal[0] and "Input/output error" in fatal[0], fatal
        assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
        switch.unlink()
        broker.start()
        assert _read_all(broker.bootstrap) == BEFORE + acked
    finally:
        broker.stop()
