"""Reads below the local log start, served from object storage (S3 on a real SeaweedFS server), over TCP.

A topic with ``remote.storage.enable``, small segments and a small ``local.retention.bytes`` is produced to
until its first segments exist only in the object store. Then confluent-kafka (from offset 0 and from a
middle offset), kafka-python (from offset 0) and ``strom consume --from-beginning`` (ListOffsets earliest,
which now answers the remote log start) each read every record back, byte for byte and in order: one
continuous log across the remote and the local part.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value
from strom.testing.seaweedfs_process import SeaweedS3Process
from tests.integration.clients import make_client
from tests.integration.rawclient import RawClient
from tests.object_stores import new_bucket, seaweedfs

__all__ = ["seaweedfs"]

TOPIC = "history"
RECORDS = 1200


@pytest.fixture(scope="module")
def tiered(
    seaweedfs: SeaweedS3Process, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, list[bytes]]]:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "2",
        **seaweedfs.rsm_config(new_bucket(seaweedfs)),
    }
    broker = BrokerProcess(tmp_path_factory.mktemp("tiered") / "data", overrides)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": "16384",
            "local.retention.bytes": "16384",
        }
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1, config=configs)]).values():
            future.result(30)
        values = [b"%06d:" % i + bytes([65 + i % 26]) * 90 for i in range(RECORDS)]
        # Small batches: a batch larger than segment.bytes is refused.
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.num.messages": 20})
        for value in values:
            producer.produce(TOPIC, value, partition=0)
        assert producer.flush(30) == 0
        # Wait until local retention has moved the local log start well past offset 0.
        deadline = time.monotonic() + 60
        while _local_start(broker) < RECORDS // 2:
            assert time.monotonic() < deadline, f"local log still starts at {_local_start(broker)}"
            time.sleep(0.3)
        yield broker, values
    finally:
        broker.stop()


def _segment_bases(broker: BrokerProcess) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (broker.data_dir / "logs" / f"{TOPIC}-0").glob("*.log"))


def _local_start(broker: BrokerProcess) -> int:
    return min(_segment_bases(broker), default=0)


def _settled_bases(broker: BrokerProcess, raw: RawClient) -> list[int]:
    """The local segments' base offsets once every rolled segment is remote and the local start settled."""
    deadline = time.monotonic() + 30
    while True:
        bases = _segment_bases(broker)
        latest_tiered = raw.list_offset(TOPIC, 0, -5, version=9)
        if _segment_bases(broker) == bases and latest_tiered["offset"] == bases[-1] - 1:
            return bases
        assert time.monotonic() < deadline, (bases, latest_tiered)
        time.sleep(0.3)


def test_list_offsets_earliest_local_and_latest_tiered(tiered: tuple[BrokerProcess, list[bytes]]) -> None:
    """KIP-405's EARLIEST_LOCAL_TIMESTAMP (-4, v8+) answers the local log start and KIP-1005's
    LATEST_TIERED_TIMESTAMP (-5, v9+) the last offset in remote storage; earliest (-2) the remote start."""
    broker, _ = tiered
    raw = RawClient(broker.bootstrap)
    try:
        bases = _settled_bases(broker, raw)
        earliest_local = raw.list_offset(TOPIC, 0, -4, version=8)
        assert earliest_local["error_code"] == 0 and earliest_local["offset"] == bases[0] > 0
        assert earliest_local["leader_epoch"] == 0
        latest_tiered = raw.list_offset(TOPIC, 0, -5, version=9)
        assert latest_tiered["error_code"] == 0 and latest_tiered["leader_epoch"] == 0
        assert latest_tiered["offset"] == bases[-1] - 1
        for version in (9, 11):
            assert raw.list_offset(TOPIC, 0, -4, version=version)["offset"] == bases[0]
        assert raw.list_offset(TOPIC, 0, -2, version=9)["offset"] == 0  # the remote log's start
        assert raw.list_offset(TOPIC, 0, -1, version=9)["offset"] == RECORDS
    finally:
        raw.close()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_a_client_reads_the_whole_log_from_offset_zero(
    tiered: tuple[BrokerProcess, list[bytes]], client: str
) -> None:
    broker, values = tiered
    got = make_client(client, broker.bootstrap).consume(TOPIC, 0, 0, RECORDS, timeout_s=60)
    assert [r.offset for r in got] == list(range(RECORDS))
    assert [r.value for r in got] == values


def test_a_read_from_the_middle_of_a_remote_segment(tiered: tuple[BrokerProcess, list[bytes]]) -> None:
    broker, values = tiered
    start = 137
    got = make_client("confluent-kafka", broker.bootstrap).consume(
        TOPIC, 0, start, RECORDS - start, timeout_s=60
    )
    assert [r.offset for r in got] == list(range(start, RECORDS))
    assert [r.value for r in got] == values[start:]


def test_strom_consume_from_beginning_sees_one_continuous_log(
    tiered: tuple[BrokerProcess, list[bytes]],
) -> None:
    broker, values = tiered
    out = subprocess.run(
        [
            sys.executable, "-m", "strom.cli.main", "--bootstrap-server", broker.bootstrap,
            "consume", TOPIC, "--from-beginning", "--max-messages", str(RECORDS), "--timeout-s", "60",
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )  # fmt: skip
    assert out.stdout.splitlines() == values


def test_strom_topics_describe_shows_the_remote_and_local_parts(
    tiered: tuple[BrokerProcess, list[bytes]],
) -> None:
    broker, _ = tiered
    raw = RawClient(broker.bootstrap)
    try:
        bases = _settled_bases(broker, raw)
    finally:
        raw.close()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "--bootstrap-server",
            broker.bootstrap,
            "topics",
            "describe",
            TOPIC,
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if "\tPartition: 0\t" in x)
    fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
    assert fields["Remote"] == f"[0, {bases[-1]})"  # every rolled segment copied
    assert fields["Local"] == f"[{bases[0]}, {RECORDS})"
    on_disk = sum(p.stat().st_size for p in (broker.data_dir / "logs" / f"{TOPIC}-0").glob("*.log"))
    assert int(fields["LocalBytes"]) == on_disk
    # The remote size, summed from __remote_log_metadata, is what the broker's metric adds up.
    assert broker.http_url is not None
    metric = value(scrape(broker.http_url), "kafka_server_brokertopicmetrics_remotelogsizebytes", topic=TOPIC)
    assert int(fields["RemoteBytes"]) == metric > 0


def test_remote_storage_metrics_under_kafkas_names(tiered: tuple[BrokerProcess, list[bytes]]) -> None:
    broker, values = tiered
    got = make_client("confluent-kafka", broker.bootstrap).consume(TOPIC, 0, 0, 10, timeout_s=60)
    assert [r.value for r in got] == values[:10]  # a remote read, whatever ran before
    assert broker.http_url is not None
    samples = scrape(broker.http_url)
    prefix = "kafka_server_brokertopicmetrics_"
    copied = value(samples, f"{prefix}remotecopybytes_total", topic=TOPIC)
    assert copied > 0 and value(samples, f"{prefix}remotecopyrequests_total", topic=TOPIC) > 0
    assert value(samples, f"{prefix}remotefetchbytes_total", topic=TOPIC) > 0
    assert value(samples, f"{prefix}remotefetchrequests_total", topic=TOPIC) > 0
    assert value(samples, f"{prefix}remotecopybytes_total") == copied  # the broker-wide meter
    assert value(samples, f"{prefix}remotelogsizebytes", topic=TOPIC) == copied  # nothing expired
    assert value(samples, f"{prefix}remotecopylagsegments", topic=TOPIC) == 0  # all rolled segments remote
    assert value(samples, f"{prefix}remotecopyerrors_total", topic=TOPIC) == 0
