"""Fetch from the closest replica (KIP-392) on a 3-broker cluster, one broker per rack (R1, R2, R3).

One cluster for the module (`replica.selector.class` = Kafka's RackAwareReplicaSelector, a short
`replica.lag.time.max.ms`). The raw-protocol test checks the broker's rules: the leader's
`preferred_read_replica`, what a follower serves (below the high watermark it learnt, the last stable
offset for read_committed) and its errors; the librdkafka test checks that a consumer with
`client.rack` fetches from the follower in its rack (librdkafka's statistics name the broker it fetches
from) and reads every record exactly once while that follower is paused out of the ISR and resumed,
and while the leader is killed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.broker.replication.replica_selector import RACK_AWARE_SELECTOR
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import decode_batches
from strom.storage.checkpoint import read_offsets
from strom.testing.cluster import LocalCluster
from tests.integration.rawclient import RawClient, batch, fetch_body
from tests.prerequisites import require_zookeeper

from .conftest import FAST, partitions_of, wait_until

pytestmark = pytest.mark.cluster

LAG_MS = 3000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_zookeeper()
    settings = {
        **FAST,
        "replica.selector.class": RACK_AWARE_SELECTOR,
        "replica.lag.time.max.ms": str(LAG_MS),
        "transaction.state.log.num.partitions": "1",
    }
    cluster = LocalCluster(tmp_path_factory.mktemp("follower-fetch"), 3, racks=3, overrides=settings)
    cluster.start()
    try:
        yield cluster
    finally:
        for proc in cluster.brokers.values():
            proc.signal(signal.SIGCONT)  # a paused broker cannot stop
        cluster.stop()


def _create(cluster: LocalCluster, name: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas])])[name].result(30)
    wait_until(
        lambda: partitions_of(cluster.bootstrap, name) == {0: (replicas[0], replicas, replicas)},
        30,
        f"{name} led by {replicas[0]} with the full ISR",
    )


def _fetch(
    client: RawClient,
    topic: str,
    offset: int,
    *,
    rack: str = "",
    epoch: int = -1,
    version: int = 11,
    isolation: int = 0,
    max_wait_ms: int = 0,
) -> dict[str, Any]:
    body = fetch_body([(topic, 0, offset, 1 << 20)], isolation_level=isolation, max_wait_ms=max_wait_ms)
    body["rack_id"] = rack
    body["min_bytes"] = 1 if max_wait_ms else 0
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
    resp = client.call(ApiKey.FETCH, version, body, timeout_s=max_wait_ms / 1000 + 10)
    return dict(resp["responses"][0]["partitions"][0])


def _values(part: dict[str, Any], start: int = 0) -> list[bytes]:
    """The values at offsets >= ``start`` (whole batches come back)."""
    batches = decode_batches(part["records"])
    return [bytes(r.value or b"") for b in batches for r in b.records if r.offset >= start]


def _leader_epoch(client: RawClient, topic: str) -> int:
    md = client.call(ApiKey.METADATA, 7, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return int(md["topics"][0]["partitions"][0]["leader_epoch"])


def test_leader_redirects_and_follower_serves_with_kafkas_errors(cluster: LocalCluster) -> None:
    _create(cluster, "ff-raw", [0, 1, 2])
    _create(cluster, "ff-only0", [0])
    leader = RawClient(cluster.brokers[0].bootstrap)
    follower = RawClient(cluster.brokers[1].bootstrap)
    values = [b"v%d" % i for i in range(10)]
    assert leader.produce("ff-raw", 0, batch(values))["error_code"] == 0
    epoch = _leader_epoch(leader, "ff-raw")
    wait_until(lambda: _fetch(follower, "ff-raw", 0, epoch=epoch)["high_watermark"] == 10, 15, "follower HW")

    # The leader: a consumer in R2 is sent to broker 1, in R3 to broker 2, with no records; in the
    # leader's rack, without a rack, or below v11, it reads here.
    for rack, preferred in (("R2", 1), ("R3", 2)):
        got = _fetch(leader, "ff-raw", 0, rack=rack, epoch=epoch)
        assert (got["error_code"], got["preferred_read_replica"], _values(got)) == (0, preferred, [])
        assert got["high_watermark"] == 10
    for rack, version in (("R1", 11), ("", 11), ("R2", 10)):
        got = _fetch(leader, "ff-raw", 0, rack=rack, version=version)
        assert (got["error_code"], got.get("preferred_read_replica", -1), _values(got)) == (0, -1, values)

    # The follower serves v11 consumers below the high watermark it learnt from the leader ...
    got = _fetch(follower, "ff-raw", 3, rack="R2", epoch=epoch)
    assert (got["error_code"], got["high_watermark"], _values(got, 3)) == (0, 10, values[3:])
    assert got["preferred_read_replica"] == -1
    # ... long-polls, and learns of a new high watermark without waiting for another append.
    cid = follower.send(
        ApiKey.FETCH, 11, fetch_body([("ff-raw", 0, 10, 1 << 20)], max_wait_ms=8000, min_bytes=1)
    )
    started = time.monotonic()
    assert leader.produce("ff-raw", 0, batch([b"late"]))["error_code"] == 0
    got = follower.recv(ApiKey.FETCH, 11, cid, timeout_s=15)["responses"][0]["partitions"][0]
    assert (got["error_code"], got["high_watermark"], _values(got)) == (0, 11, [b"late"])
    assert time.monotonic() - started < 5

    # ... and answers like Kafka otherwise.
    codes = {
        "future epoch": _fetch(follower, "ff-raw", 0, epoch=epoch + 1)["error_code"],
        "beyond the log": _fetch(follower, "ff-raw", 50, epoch=epoch)["error_code"],
        "below v11": _fetch(follower, "ff-raw", 0, version=10)["error_code"],
        "not hosted": _fetch(follower, "ff-only0", 0)["error_code"],
    }
    assert codes == {
        "future epoch": ErrorCode.UNKNOWN_LEADER_EPOCH,
        "beyond the log": ErrorCode.OFFSET_OUT_OF_RANGE,
        "below v11": ErrorCode.NOT_LEADER_OR_FOLLOWER,
        "not hosted": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
    # Without a leader epoch (no KIP-320) an offset beyond the follower's log is not definitive: empty.
    got = _fetch(follower, "ff-raw", 50)
    assert (got["error_code"], _values(got)) == (0, [])
    # ListOffsets stays with the leader.
    assert follower.list_offset("ff-raw", 0, -1)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.list_offset("ff-raw", 0, -1)["offset"] == 11

    # read_committed on the follower stops at the last stable offset (bounded by its high watermark)
    # and lists the aborted transactions from its own transaction index.
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "ff-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce("ff-raw", b"t%d" % i, partition=0)
    txn.flush(30)
    wait_until(
        lambda: _fetch(follower, "ff-raw", 0, epoch=epoch)["high_watermark"] == 14, 15, "txn replicated"
    )
    got = _fetch(follower, "ff-raw", 0, epoch=epoch, isolation=1)
    assert (got["last_stable_offset"], got["high_watermark"]) == (11, 14)
    assert _values(got) == [*values, b"late"]
    txn.abort_transaction(30)
    del txn
    wait_until(
        lambda: _fetch(follower, "ff-raw", 0, epoch=epoch, isolation=1)["last_stable_offset"] == 15, 15
    )
    got = _fetch(follower, "ff-raw", 11, epoch=epoch, isolation=1)
    assert [a["first_offset"] for a in got["aborted_transactions"]] == [11]

    # The follower's high watermark is checkpointed like the leader's (here at a clean stop).
    broker2 = cluster.brokers[2]
    broker2.stop()
    hw = read_offsets(str(Path(broker2.data_dir) / "logs" / "replication-offset-checkpoint"))
    assert {(tp.topic, tp.partition): o for tp, o in hw.items()}[("ff-raw", 0)] == 15
    broker2.start()
    cluster.wait_for_brokers(3)

    # `strom consume --rack R2` is librdkafka's client.rack: its fetch log shows the move to broker 1.
    out = subprocess.run(
        [
            *(sys.executable, "-m", "strom.cli.main", "consume", "ff-raw"),
            *("--bootstrap-server", cluster.bootstrap, "--rack", "R2", "--from-beginning"),
            *("--max-messages", "11", "--property", "debug=fetch", "--verbose"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [v.decode() for v in [*values, b"late"]]
    assert "migrating from broker 0 to 1 (leader is 0): preferred replica updated" in out.stderr

    # Once broker 1 no longer holds the partition (reassigned away), it answers NOT_LEADER_OR_FOLLOWER.
    controller = int(
        leader.call(ApiKey.METADATA, 7, {"topics": [], "allow_auto_topic_creation": False})["controller_id"]
    )
    reassign = {
        "timeout_ms": 30000,
        "topics": [{"name": "ff-raw", "partitions": [{"partition_index": 0, "replicas": [0, 2]}]}],
    }
    with RawClient(cluster.brokers[controller].bootstrap) as admin:
        answer = admin.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, reassign)
    assert answer["responses"][0]["partitions"][0]["error_code"] == 0
    wait_until(
        lambda: _fetch(follower, "ff-raw", 0, rack="R2")["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER,
        30,
        "broker 1 to drop its replica",
    )
    # ... and the leader no longer sends rack R2 anywhere else: it serves the consumer itself.
    got = _fetch(leader, "ff-raw", 0, rack="R2")
    assert (got["error_code"], got["preferred_read_replica"]) == (0, -1)
    assert _values(got)[:11] == [*values, b"late"]
    leader.close()
    follower.close()


class _Stats:
    """The latest (leader, broker fetched from) librdkafka reports for one partition."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.latest: tuple[int, int] | None = None
        self.seen: set[tuple[int, int]] = set()

    def __call__(self, raw: str) -> None:
        part = json.loads(raw).get("topics", {}).get(self.topic, {}).get("partitions", {}).get("0")
        if part is not None:
            self.latest = (int(part["leader"]), int(part["broker"]))
            self.seen.add(self.latest)


def test_librdkafka_consumer_reads_from_its_rack_across_pause_and_failover(cluster: LocalCluster) -> None:
    topic = "ff-stream"
    # Leader 0 (R1); broker 1 (R2) stays a follower when 0 dies (2 is next in line).
    _create(cluster, topic, [0, 2, 1])
    produced: list[int] = []
    delivered: set[int] = set()
    stop = threading.Event()

    def produce() -> None:
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered.add(int(msg.value()))

        i = 0
        while not stop.is_set():
            producer.produce(topic, b"%d" % i, partition=0, on_delivery=on_delivery)
            produced.append(i)
            i += 1
            producer.poll(0.01)
        assert producer.flush(60) == 0

    stats = _Stats(topic)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "ff-readers",
            "client.rack": "R2",
            "enable.auto.commit": False,
            "statistics.interval.ms": 200,
            "stats_cb": stats,
            "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 4000,
            "socket.connection.setup.timeout.ms": 4000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    consumed: list[int] = []

    def consume_until(what: str, condition: Any, timeout_s: float = 45) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                consumed.append(int(msg.value()))
            if condition():
                return
        raise AssertionError(f"timed out waiting for {what}: stats {stats.latest}, consumed {len(consumed)}")

    def reads_from(leader: int, broker: int) -> Any:
        mark = len(consumed)
        return lambda: stats.latest == (leader, broker) and len(consumed) > mark + 20

    worker = threading.Thread(target=produce)
    worker.start()
    try:
        consume_until("fetching from follower 1", reads_from(0, 1))

        cluster.brokers[1].signal(signal.SIGSTOP)
        consume_until("back on leader 0", reads_from(0, 0))
        only0 = cluster.brokers[0].bootstrap
        wait_until(lambda: 1 not in partitions_of(only0, topic)[0][2], 30, "broker 1 out of the ISR")

        cluster.brokers[1].signal(signal.SIGCONT)
        consume_until("fetching from follower 1 again", reads_from(0, 1))

        cluster.brokers[0].kill()
        consume_until("follower 1 under the new leader 2", reads_from(2, 1), 60)
    finally:
        cluster.brokers[1].signal(signal.SIGCONT)
        stop.set()
        worker.join(90)
    assert delivered, "nothing was delivered"
    consume_until("every delivered record", lambda: delivered <= set(consumed), 60)
    consumer.close()
    # Exactly once: no duplicate, nothing out of order, and only records the producer sent.
    assert len(consumed) == len(set(consumed))
    assert consumed == sorted(consumed)
    assert set(consumed) <= set(produced)
    assert {(0, 1), (0, 0), (2, 1)} <= stats.seen
    # The follower fences a consumer still at the epoch of the killed leader.
    with RawClient(cluster.brokers[1].bootstrap) as follower:
        epoch = _leader_epoch(follower, topic)
        assert epoch > 0
        assert _fetch(follower, topic, 0, epoch=epoch - 1)["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
        got = _fetch(follower, topic, 0, rack="R2", epoch=epoch)
        assert (got["error_code"], _values(got)[:1]) == (0, [b"0"])
