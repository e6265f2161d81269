"""KIP-932 share groups on one node with confluent-kafka's ``ShareConsumer`` over TCP.

Two consumers share one partition's records, each record handed to one of them and accepted once;
three consumers share two partitions; one consumer reads several partitions, each record on its first
delivery; a consumer killed while holding records (never acknowledged) has them redelivered to
another, with a higher delivery count, once their acquisition lock runs out; rejected records are
never delivered again, and released ones are redelivered until `group.share.delivery.count.limit`
archives them.
ListGroups shows the group with type "share", ShareGroupDescribe its members, and the leader's
``/metrics`` the share-partition's start offset and backlog. A killed consumer's share session is
evicted from the leader once idle for the session timeout, and the records it held are released then,
long before their locks would run out.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value
from tests.integration.kip848_clients import wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import ShareConsumerProcess

LOCK_MS = 3000
DELIVERY_LIMIT = 3
CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": str(DELIVERY_LIMIT),
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "6000",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", CONFIGS)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., ShareConsumerProcess]]:
    consumers: list[ShareConsumerProcess] = []

    def start(bootstrap: str, topic: str, group: str, **cfg: Any) -> ShareConsumerProcess:
        config = {"bootstrap": bootstrap, "topics": [topic], "group": group, **cfg}
        consumer = ShareConsumerProcess(tmp_path, f"share-{len(consumers)}", config)
        consumers.append(consumer)
        return consumer

    yield start
    for consumer in consumers:
        consumer.kill()


def make_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, values: list[str], per_flush: int = 10) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i, text in enumerate(values):
        producer.produce(topic, value=text.encode(), partition=0)
        if (i + 1) % per_flush == 0:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0


def started(consumer: ShareConsumerProcess) -> bool:
    return any(e["ev"] == "started" for e in consumer.snapshot())


def wait_assigned(bootstrap: str, group: str, members: int, timeout_s: float = 60) -> dict[str, set[int]]:
    """Each member's partitions once ShareGroupDescribe shows ``members`` members, each assigned some
    partition (a bounded wait: a consumer that has started may not have joined yet)."""
    assigned: dict[str, set[int]] = {}

    def ready() -> bool:
        nonlocal assigned
        with RawClient(bootstrap) as raw:
            described = raw.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group]})
        (desc,) = described["groups"]
        if desc["error_code"] != 0:
            return False
        assigned = {
            m["member_id"]: {p for t in m["assignment"]["topic_partitions"] for p in t["partitions"]}
            for m in desc["members"]
        }
        return len(assigned) == members and all(assigned.values())

    assert wait_until(ready, timeout_s, interval_s=0.25), f"the group's members and partitions: {assigned}"
    return assigned


def test_two_consumers_share_one_partition(broker: BrokerProcess, spawn: Callable[..., Any]) -> None:
    topic, group, total = "share-two", "share-two-g", 300
    make_topic(broker.bootstrap, topic)
    consumers = [spawn(broker.bootstrap, topic, group, max_poll_records=20) for _ in range(2)]
    assert wait_until(lambda: all(started(c) for c in consumers), 30)
    # Both join (and so both share partition 0) before the records arrive.
    assert list(wait_assigned(broker.bootstrap, group, 2).values()) == [{0}, {0}]
    produce(broker.bootstrap, topic, [f"v{i}" for i in range(total)])

    def seen() -> set[int]:
        return {o for c in consumers for o in c.offsets()}

    assert wait_until(lambda: len(seen()) == total, 60), f"saw {len(seen())} of {total}"
    delivered = Counter(o for c in consumers for o in c.offsets())
    assert sorted(delivered) == list(range(total))
    assert set(delivered.values()) == {1}, "a record was delivered twice"
    assert all(c.offsets() for c in consumers), [len(c.offsets()) for c in consumers]

    with RawClient(broker.bootstrap) as raw:
        listed = raw.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert {(g["group_id"], g["group_type"]) for g in listed["groups"]} >= {(group, "share")}
        described = raw.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group]})
        (desc,) = described["groups"]
        assert desc["error_code"] == 0
        assert desc["group_state"] == "Stable"
        assert len(desc["members"]) == 2
    for c in consumers:
        c.terminate()
        assert any(e["ev"] == "closed" for e in c.snapshot())


def test_more_consumers_than_partitions(broker: BrokerProcess, spawn: Callable[..., Any]) -> None:
    """Three consumers on two partitions: every partition is read, shared where members outnumber
    partitions, and every record is handed out exactly once (a response that both answers
    acknowledgements and carries records must not lose the records)."""
    topic, group, total = "share-three", "share-three-g", 400
    make_topic(broker.bootstrap, topic, partitions=2)
    consumers = [spawn(broker.bootstrap, topic, group, max_poll_records=25) for _ in range(3)]
    assert wait_until(lambda: all(started(c) for c in consumers), 30)
    assigned = wait_assigned(broker.bootstrap, group, 3)
    # Every partition goes to some member; with three members on two, one is shared.
    holders = Counter(p for parts in assigned.values() for p in parts)
    assert set(holders) == {0, 1} and max(holders.values()) >= 2, assigned
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for i in range(total):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
        if i % 20 == 19:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0

    def seen() -> Counter[tuple[int, int]]:
        return Counter((e["p"], e["o"]) for c in consumers for e in c.records())

    assert wait_until(lambda: len(seen()) == total, 60), f"saw {len(seen())} of {total}"
    delivered = seen()
    assert sorted(delivered) == sorted((p, o) for p in range(2) for o in range(total // 2))
    assert set(delivered.values()) == {1}, "a record was delivered twice"
    assert {e["n"] for c in consumers for e in c.records()} == {1}
    readers = {p: {c.name for c in consumers for e in c.records() if e["p"] == p} for p in range(2)}
    assert max(len(names) for names in readers.values()) >= 2, f"no partition was shared: {readers}"
    for c in consumers:
        c.terminate()


def test_one_consumer_reads_several_partitions_at_first_delivery(
    broker: BrokerProcess, spawn: Callable[..., Any]
) -> None:
    """One stored batch per partition, read by one consumer in small polls: a fetch then answers the
    acknowledgements of an exhausted partition and hands out another partition's records in the same
    response. Every record comes on its first delivery (a response the client had to drop would bring
    its records back only after their locks ran out, as second deliveries)."""
    topic, group, per_partition = "share-multi", "share-multi-g", 100
    make_topic(broker.bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200})
    for i in range(3 * per_partition):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(15) == 0
    consumer = spawn(broker.bootstrap, topic, group, max_poll_records=10)
    assert wait_until(lambda: len(consumer.records()) >= 3 * per_partition, 60)
    got = Counter((e["p"], e["o"]) for e in consumer.records())
    assert sorted(got) == sorted((p, o) for p in range(3) for o in range(per_partition))
    assert {e["n"] for e in consumer.records()} == {1}
    consumer.terminate()


def test_a_killed_consumers_records_are_redelivered(broker: BrokerProcess, spawn: Callable[..., Any]) -> None:
    topic, group, total = "share-kill", "share-kill-g", 40
    make_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [f"v{i}" for i in range(total)], per_flush=total)
    holder = spawn(broker.bootstrap, topic, group, mode="hold")
    assert wait_until(lambda: bool(holder.offsets()), 30)
    held = set(holder.offsets())
    survivor = spawn(broker.bootstrap, topic, group)
    assert wait_until(lambda: started(survivor), 30)
    holder.kill()
    killed_at = time.monotonic()

    def seen() -> set[int]:
        return set(survivor.offsets())

    assert wait_until(lambda: seen() >= set(range(total)), 60), sorted(set(range(total)) - seen())
    assert time.monotonic() - killed_at < 60
    again = {e["o"]: e["n"] for e in survivor.records() if e["o"] in held}
    assert set(again) == held
    assert set(again.values()) == {2}, "the held records came back on their second delivery"
    survivor.terminate()


def test_reject_and_the_delivery_limit_archive(broker: BrokerProcess, spawn: Callable[..., Any]) -> None:
    topic, group = "share-verdicts", "share-verdicts-g"
    make_topic(broker.bootstrap, topic)
    values = (
        [f"ok-{i}" for i in range(10)]
        + [f"reject-{i}" for i in range(5)]
        + [f"release-{i}" for i in range(5)]
    )
    produce(broker.bootstrap, topic, values, per_flush=5)
    consumer = spawn(broker.bootstrap, topic, group, mode="verdicts")

    def count(prefix: str) -> Counter[str]:
        return Counter(e["v"] for e in consumer.records() if e["v"].startswith(prefix))

    assert wait_until(
        lambda: len(count("release-")) == 5 and min(count("release-").values()) >= DELIVERY_LIMIT, 60
    )
    time.sleep(2)  # nothing more comes: every record is accepted, rejected or archived
    assert count("ok-") == Counter({f"ok-{i}": 1 for i in range(10)})
    assert count("reject-") == Counter({f"reject-{i}": 1 for i in range(5)})
    assert count("release-") == Counter({f"release-{i}": DELIVERY_LIMIT for i in range(5)})
    deliveries = sorted({e["n"] for e in consumer.records() if e["v"].startswith("release-")})
    assert deliveries == list(range(1, DELIVERY_LIMIT + 1))
    # The leader's /metrics: every record is done, so the start offset is past them all.
    assert broker.http_url is not None
    samples = scrape(broker.http_url)
    labels = {"sharegroup": group, "topic": topic, "partition": "0"}
    assert value(samples, "kafka_sharegroup_start_offset", **labels) == len(values)
    assert value(samples, "kafka_sharegroup_backlog", **labels) == 0
    consumer.terminate()


def topic_id_of(raw: RawClient, topic: str) -> bytes:
    meta = raw.call(ApiKey.METADATA, 12, {"topics": [{"topic_id": bytes(16), "name": topic}]})
    return bytes(meta["topics"][0]["topic_id"])


def share_fetch(raw: RawClient, group: str, member: str, epoch: int, topic_id: bytes, acks: list[Any]) -> Any:
    body = {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait_ms": 200,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 100,
        "batch_size": 100,
        "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": acks}]}
        ],
        "forgotten_topics_data": [],
    }
    return raw.call(ApiKey.SHARE_FETCH, 1, body)


def test_share_apis_on_the_wire(broker: BrokerProcess) -> None:
    """ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1 as raw requests: a member joins, opens a
    share session, acquires records, accepts them piggy-backed, and a wrong session epoch is refused."""
    topic, group = "share-raw", "share-raw-g"
    make_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [f"r{i}" for i in range(5)], per_flush=5)
    with RawClient(broker.bootstrap) as raw:
        topic_id = topic_id_of(raw, topic)
        joined = raw.call(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            1,
            {
                "group_id": group,
                "member_id": "",
                "member_epoch": 0,
                "rack_id": None,
                "subscribed_topic_names": [topic],
            },
        )
        assert joined["error_code"] == 0 and joined["member_epoch"] == 1
        member = joined["member_id"]
        assert joined["assignment"]["assigned_topic_partitions"] == [
            {"topic_id": topic_id, "partitions": [0]}
        ]
        # No session yet: SHARE_SESSION_NOT_FOUND; ShareAcknowledge cannot open one.
        assert (
            share_fetch(raw, group, member, 1, topic_id, [])["error_code"]
            == ErrorCode.SHARE_SESSION_NOT_FOUND
        )
        ack_body = {"group_id": group, "member_id": member, "share_session_epoch": 0, "topics": []}
        refused = raw.call(ApiKey.SHARE_ACKNOWLEDGE, 1, ack_body)
        assert refused["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        opened = share_fetch(raw, group, member, 0, topic_id, [])
        assert opened["error_code"] == 0 and opened["acquisition_lock_timeout_ms"] == LOCK_MS
        (part,) = opened["responses"][0]["partitions"]
        assert part["acquired_records"] == [{"first_offset": 0, "last_offset": 4, "delivery_count": 1}]
        assert part["records"]
        # The next epoch accepts them (piggy-backed) and finds nothing more.
        accept = [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}]
        second = share_fetch(raw, group, member, 1, topic_id, accept)
        (part,) = second["responses"][0]["partitions"]
        assert (part["acknowledge_error_code"], part["acquired_records"]) == (0, [])
        # An entry without records carries an empty record set, never a null one: librdkafka fails
        # the whole response on a null set (and so loses what it acquired on other partitions).
        assert part["records"] is not None and len(part["records"]) == 0
        # Accepting them again: they are no longer this member's.
        again = dict(
            ack_body,
            share_session_epoch=2,
            topics=[
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": accept}],
                }
            ],
        )
        answer = raw.call(ApiKey.SHARE_ACKNOWLEDGE, 1, again)
        assert answer["responses"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_RECORD_STATE
        assert (
            share_fetch(raw, group, member, 7, topic_id, [])["error_code"]
            == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        )
        assert share_fetch(raw, group, member, -1, topic_id, [])["error_code"] == 0
        left = raw.call(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            1,
            {
                "group_id": group,
                "member_id": member,
                "member_epoch": -1,
                "rack_id": None,
                "subscribed_topic_names": None,
            },
        )
        assert left["error_code"] == 0 and left["member_epoch"] == -1


def test_a_killed_consumers_session_is_evicted(broker: BrokerProcess, spawn: Callable[..., Any]) -> None:
    """A SIGKILLed consumer never closes its share session: the leader evicts it once it has been idle
    for the session timeout. Requests at a wrong epoch (the probe's) do not keep it alive."""
    topic, group = "share-evict", "share-evict-g"
    make_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, [f"e{i}" for i in range(10)], per_flush=10)
    consumer = spawn(broker.bootstrap, topic, group)
    assert wait_until(lambda: len(consumer.offsets()) == 10, 30)
    (member,) = wait_assigned(broker.bootstrap, group, 1)
    with RawClient(broker.bootstrap) as raw:
        topic_id = topic_id_of(raw, topic)

        def probe() -> int:
            # An epoch the live session cannot be at: INVALID_SHARE_SESSION_EPOCH while it exists.
            return int(share_fetch(raw, group, member, 2**31 - 1, topic_id, [])["error_code"])

        assert probe() == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        consumer.kill()
        assert probe() == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        timeout_s = int(CONFIGS["group.share.session.timeout.ms"]) / 1000
        assert wait_until(lambda: probe() == ErrorCode.SHARE_SESSION_NOT_FOUND, timeout_s + 30, 0.5)


def test_an_evicted_sessions_records_are_released(
    tmp_path_factory: pytest.TempPathFactory, spawn: Callable[..., Any]
) -> None:
    """Records locked far longer than the session timeout: a killed consumer's are released when its
    idle session is evicted, not when their locks run out."""
    lock_ms = 120_000
    configs = dict(CONFIGS, **{"group.share.record.lock.duration.ms": str(lock_ms)})
    broker = BrokerProcess(tmp_path_factory.mktemp("long-lock") / "data", configs)
    broker.start()
    try:
        topic, group, total = "share-evict-release", "share-evict-release-g", 20
        make_topic(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, [f"h{i}" for i in range(total)], per_flush=total)
        holder = spawn(broker.bootstrap, topic, group, mode="hold")
        assert wait_until(lambda: bool(holder.offsets()), 30)
        held = set(holder.offsets())
        survivor = spawn(broker.bootstrap, topic, group)
        assert wait_until(lambda: started(survivor), 30)
        holder.kill()
        killed_at = time.monotonic()
        assert wait_until(lambda: set(survivor.offsets()) >= set(range(total)), 60)
        assert time.monotonic() - killed_at < lock_ms / 1000 / 2
        again = {e["o"]: e["n"] for e in survivor.records() if e["o"] in held}
        assert set(again) == held and set(again.values()) == {2}
        survivor.terminate()
    finally:
        broker.stop()
