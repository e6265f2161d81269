"""Group and offset APIs at every advertised version over raw TCP, plus in-process client checks:
committed offsets across broker restarts, independent groups, admin tools, aiokafka.

The raw requests are encoded with Strom's own codec (which is cross-checked against kafka-python's
protocol classes in the unit tests), so each (API, version) in the advertised table is exercised here
against a live broker.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import SUPPORTED, ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value

_correlation = itertools.count(1)


class RawClient:
    """One blocking connection speaking the Kafka protocol through Strom's codec."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=20)

    def call(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        correlation_id = next(_correlation)
        self.sock.sendall(encode_request(api_key, version, correlation_id, "raw-test", body))
        (size,) = struct.unpack(">i", self._read(4))
        got_id, response = decode_response(api_key, version, self._read(size))
        assert got_id == correlation_id
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    client = RawClient(broker.bootstrap)
    yield client
    client.close()


def versions(key: ApiKey) -> list[int]:
    low, high = SUPPORTED[key]
    return list(range(low, high + 1))


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 3) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(15) == 0


# --- raw protocol, every advertised version -----------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator(raw: RawClient, broker: BrokerProcess, version: int) -> None:
    if version >= 4:  # KIP-699: several keys per request, one answer each
        for key_type, keys in ((0, ["some-group", "other-group"]), (1, ["some-txn"])):
            body = {"key_type": key_type, "coordinator_keys": keys}
            found = raw.call(ApiKey.FIND_COORDINATOR, version, body)["coordinators"]
            assert [(c["key"], c["error_code"], c["node_id"], c["port"]) for c in found] == [
                (key, 0, 0, broker.port) for key in keys
            ]
        if version >= 6:  # KIP-932's share coordinator: share groups are not served
            (share,) = raw.call(
                ApiKey.FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": ["g:t:0"]}
            )["coordinators"]
            assert share["error_code"] == ErrorCode.INVALID_REQUEST
        return
    resp = raw.call(ApiKey.FIND_COORDINATOR, version, {"key": "some-group", "key_type": 0})
    assert resp["error_code"] == 0
    assert (resp["node_id"], resp["port"]) == (0, broker.port)
    if version >= 1:
        # Transactional ids (key type 1): the leader of their __transaction_state partition.
        txn = raw.call(ApiKey.FIND_COORDINATOR, version, {"key": "some-txn", "key_type": 1})
        assert (txn["error_code"], txn["node_id"], txn["port"]) == (0, 0, broker.port)


def _join(raw: RawClient, version: int, group: str, member_id: str = "") -> dict[str, Any]:
    return raw.call(
        ApiKey.JOIN_GROUP,
        version,
        {
            "group_id": group,
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}],
            "reason": "raw test",  # v8+ (KIP-800)
        },
    )


@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
def test_membership_round_trip(raw: RawClient, version: int) -> None:
    """JoinGroup vN with SyncGroup, Heartbeat and LeaveGroup at min(N, their max)."""
    group = f"raw-membership-{version}"
    sync_v = min(version, SUPPORTED[ApiKey.SYNC_GROUP][1])
    hb_v = min(version, SUPPORTED[ApiKey.HEARTBEAT][1])
    leave_v = min(version, SUPPORTED[ApiKey.LEAVE_GROUP][1])
    joined = _join(raw, version, group)
    if version >= 4:  # KIP-394: first join hands out the member id
        assert joined["error_code"] == ErrorCode.MEMBER_ID_REQUIRED and joined["member_id"]
        joined = _join(raw, version, group, joined["member_id"])
    assert joined["error_code"] == 0, joined
    member_id = joined["member_id"]
    assert joined["generation_id"] == 1 and joined["leader"] == member_id
    assert joined["protocol_name"] == "range"
    if version >= 7:
        assert joined["protocol_type"] == "consumer"
    if version >= 9:
        assert joined["skip_assignment"] is False
    assert [m["member_id"] for m in joined["members"]] == [member_id]
    assert bytes(joined["members"][0]["metadata"]) == b"\x00\x00\x00\x00\x00\x00"

    synced = raw.call(
        ApiKey.SYNC_GROUP,
        sync_v,
        {
            "group_id": group,
            "generation_id": 1,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member_id, "assignment": b"my-assignment"}],
        },
    )
    assert synced["error_code"] == 0 and bytes(synced["assignment"]) == b"my-assignment"
    if sync_v >= 5:  # the group's protocol, checked against the request's
        assert (synced["protocol_type"], synced["protocol_name"]) == ("consumer", "range")
        other = {
            "group_id": group,
            "generation_id": 1,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "roundrobin",
            "assignments": [],
        }
        mismatch = raw.call(ApiKey.SYNC_GROUP, sync_v, other)
        assert mismatch["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    hb = {"group_id": group, "generation_id": 1, "member_id": member_id, "group_instance_id": None}
    assert raw.call(ApiKey.HEARTBEAT, hb_v, hb)["error_code"] == 0
    assert (
        raw.call(ApiKey.HEARTBEAT, hb_v, {**hb, "generation_id": 9})["error_code"]
        == ErrorCode.ILLEGAL_GENERATION
    )
    assert (
        raw.call(ApiKey.HEARTBEAT, hb_v, {**hb, "member_id": "x"})["error_code"]
        == ErrorCode.UNKNOWN_MEMBER_ID
    )

    if leave_v >= 3:
        left = raw.call(
            ApiKey.LEAVE_GROUP,
            leave_v,
            {
                "group_id": group,
                "members": [{"member_id": member_id, "reason": "done"}, {"member_id": "ghost"}],
            },
        )
        assert left["error_code"] == 0
        assert [m["error_code"] for m in left["members"]] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
    else:
        left = raw.call(ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "member_id": member_id})
        assert left["error_code"] == 0
    assert raw.call(ApiKey.HEARTBEAT, hb_v, hb)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit_and_fetch_every_version(
    raw: RawClient, broker: BrokerProcess, topic_name: str, version: int
) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = f"raw-offsets-{version}"
    commit = raw.call(
        ApiKey.OFFSET_COMMIT,
        version,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic_name,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 42,
                            "committed_leader_epoch": 7,
                            "committed_metadata": "meta",
                        },
                        {"partition_index": 9, "committed_offset": 1, "committed_metadata": None},
                    ],
                },
                {"name": "no-such-topic", "partitions": [{"partition_index": 0, "committed_offset": 1}]},
            ],
        },
    )
    errors = {
        (t["name"], p["partition_index"]): p["error_code"] for t in commit["topics"] for p in t["partitions"]
    }
    assert errors == {
        (topic_name, 0): 0,
        (topic_name, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    for fetch_v in versions(ApiKey.OFFSET_FETCH):
        fetched = offset_fetch(raw, fetch_v, group, [{"name": topic_name, "partition_indexes": [0, 1]}])
        parts = {p["partition_index"]: p for t in fetched["topics"] for p in t["partitions"]}
        assert parts[0]["committed_offset"] == 42 and parts[0]["metadata"] == "meta"
        assert parts[1]["committed_offset"] == -1 and parts[1]["error_code"] == 0
        if fetch_v >= 5:
            assert parts[0]["committed_leader_epoch"] == (7 if version >= 6 else -1)
            assert parts[1]["committed_leader_epoch"] == -1
        if fetch_v >= 2:
            assert fetched["error_code"] == 0
            everything = offset_fetch(raw, fetch_v, group, None)
            assert [
                (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in everything["topics"]
            ] == [(topic_name, [0])]


def offset_fetch(raw: RawClient, version: int, group: str, topics: list[dict[str, Any]] | None) -> Any:
    """One group's OffsetFetch answer in the v1-7 shape (``topics``, ``error_code``) at any version:
    from v8 (KIP-709) the request carries a list of groups, here of one, without member (admin-style)."""
    if version < 8:
        return raw.call(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": topics})
    body = {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}]}
    (answer,) = raw.call(ApiKey.OFFSET_FETCH, version, body)["groups"]
    assert answer["group_id"] == group
    return answer


def _commit_one(raw: RawClient, group: str, topic: str, partition: int, offset: int) -> None:
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "committed_offset": offset}]}
        ],
    }
    (topic_answer,) = raw.call(ApiKey.OFFSET_COMMIT, 8, body)["topics"]
    assert [p["error_code"] for p in topic_answer["partitions"]] == [0]


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_several_groups(
    raw: RawClient, broker: BrokerProcess, topic_name: str, version: int
) -> None:
    """OffsetFetch v8+ (KIP-709): one request for several groups, each answered on its own, in order;
    a group with nothing committed answers -1 for what it is asked, and nothing for "all topics"."""
    create_topic(broker.bootstrap, topic_name)
    first, second, empty = (f"multi-{version}-{name}" for name in ("a", "b", "none"))
    _commit_one(raw, first, topic_name, 0, 42)
    _commit_one(raw, second, topic_name, 1, 7)
    named = [{"name": topic_name, "partition_indexes": [0, 1]}]
    body = {
        "groups": [
            {"group_id": first, "member_id": None, "member_epoch": -1, "topics": named},
            {"group_id": second, "member_id": None, "member_epoch": -1, "topics": None},
            {"group_id": empty, "member_id": None, "member_epoch": -1, "topics": named},
            {"group_id": empty, "member_id": None, "member_epoch": -1, "topics": None},
        ],
        "require_stable": True,
    }
    answers = raw.call(ApiKey.OFFSET_FETCH, version, body)["groups"]
    assert [(g["group_id"], g["error_code"]) for g in answers] == [
        (first, 0),
        (second, 0),
        (empty, 0),
        (empty, 0),
    ]

    def offsets(answer: dict[str, Any]) -> dict[tuple[str, int], int]:
        return {
            (t["name"], p["partition_index"]): p["committed_offset"]
            for t in answer["topics"]
            for p in t["partitions"]
        }

    assert offsets(answers[0]) == {(topic_name, 0): 42, (topic_name, 1): -1}
    assert offsets(answers[1]) == {(topic_name, 1): 7}
    assert offsets(answers[2]) == {(topic_name, 0): -1, (topic_name, 1): -1}
    assert offsets(answers[3]) == {}


def test_kafka_python_admin_lists_several_groups_in_one_request(
    raw: RawClient, broker: BrokerProcess, topic_name: str
) -> None:
    """kafka-python 3's admin asks OffsetFetch v8 for every group of one coordinator in one request."""
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    create_topic(broker.bootstrap, topic_name)
    groups = {f"kp-multi-{i}-{topic_name}": i + 3 for i in range(3)}
    for group, offset in groups.items():
        _commit_one(raw, group, topic_name, 2, offset)
    assert broker.http_url is not None
    requests = "kafka_network_requestmetrics_requests_total"
    before = value(scrape(broker.http_url), requests, request="OffsetFetch", version="8")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        listed = admin.list_group_offsets(list(groups))
    finally:
        admin.close()
    assert {group: {tp: om.offset for tp, om in found.items()} for group, found in listed.items()} == {
        group: {KpTopicPartition(topic_name, 2): offset} for group, offset in groups.items()
    }
    assert value(scrape(broker.http_url), requests, request="OffsetFetch", version="8") == before + 1


def test_admin_apis_every_version(raw: RawClient, broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    group = "raw-admin"
    joined = _join(raw, 3, group)
    member_id = joined["member_id"]
    raw.call(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group,
            "generation_id": 1,
            "member_id": member_id,
            "assignments": [{"member_id": member_id, "assignment": b"a"}],
        },
    )
    for v in versions(ApiKey.DESCRIBE_GROUPS):
        resp = raw.call(
            ApiKey.DESCRIBE_GROUPS,
            v,
            {"groups": [group, "raw-unknown"], "include_authorized_operations": False},
        )
        described, unknown = resp["groups"]
        assert (described["error_code"], described["group_state"], described["protocol_data"]) == (
            0,
            "Stable",
            "range",
        )
        assert [m["member_id"] for m in described["members"]] == [member_id]
        assert bytes(described["members"][0]["member_assignment"]) == b"a"
        if v >= 6:  # KIP-1043: an unknown group is an error, no longer a Dead one
            assert (unknown["error_code"], unknown["error_message"]) == (
                ErrorCode.GROUP_ID_NOT_FOUND,
                "Group raw-unknown not found.",
            )
        else:
            assert (unknown["error_code"], unknown["group_state"]) == (0, "Dead")
    for v in versions(ApiKey.LIST_GROUPS):
        listed = raw.call(ApiKey.LIST_GROUPS, v, {})
        entry = next(g for g in listed["groups"] if g["group_id"] == group)
        assert {"group_id": group, "protocol_type": "consumer"}.items() <= entry.items()
        if v >= 4:
            assert entry["group_state"] == "Stable"
            assert _listed(raw, v, {"states_filter": ["stable", "Empty"]}) >= {group}
            assert group not in _listed(raw, v, {"states_filter": ["Empty"]})
        if v >= 5:
            assert entry["group_type"] == "classic"
            assert _listed(raw, v, {"types_filter": ["Classic"], "states_filter": ["Stable"]}) >= {group}
            assert _listed(raw, v, {"types_filter": ["consumer"]}) == set()
    commit = {
        "group_id": group,
        "generation_id_or_member_epoch": 1,
        "member_id": member_id,
        "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
    }
    assert raw.call(ApiKey.OFFSET_COMMIT, 7, commit)["topics"][0]["partitions"][0]["error_code"] == 0
    # OffsetDelete: the member's subscription (empty topic list here) does not include the topic.
    deleted = raw.call(
        ApiKey.OFFSET_DELETE,
        0,
        {"group_id": group, "topics": [{"name": topic_name, "partitions": [{"partition_index": 0}]}]},
    )
    assert deleted["error_code"] == 0 and deleted["topics"][0]["partitions"][0]["error_code"] == 0
    for v in versions(ApiKey.DELETE_GROUPS):
        busy = raw.call(ApiKey.DELETE_GROUPS, v, {"groups_names": [group]})
        assert busy["results"] == [{"group_id": group, "error_code": ErrorCode.NON_EMPTY_GROUP}]
    raw.call(ApiKey.LEAVE_GROUP, 1, {"group_id": group, "member_id": member_id})
    gone = raw.call(ApiKey.DELETE_GROUPS, 1, {"groups_names": [group, "raw-never"]})
    assert [r["error_code"] for r in gone["results"]] == [0, ErrorCode.GROUP_ID_NOT_FOUND]


def _listed(raw: RawClient, version: int, filters: dict[str, list[str]]) -> set[str]:
    """ListGroups with state/type filters (v4/v5): the group ids answered."""
    resp = raw.call(ApiKey.LIST_GROUPS, version, filters)
    assert resp["error_code"] == 0
    return {g["group_id"] for g in resp["groups"]}


# --- clients ------------------------------------------------------------------------------------


def _consume_all(bootstrap: str, topic: str, group: str, expected: int, timeout_s: float = 30) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    assert got == expected
    return consumer


@pytest.mark.slow
def test_committed_offsets_survive_broker_restart_and_crash(
    strom_broker_factory: Any, topic_name: str
) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    b = strom_broker_factory(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"})
    create_topic(b.bootstrap, topic_name)
    produce(b.bootstrap, topic_name, 30)
    consumer = _consume_all(b.bootstrap, topic_name, "ck-group", 30)
    consumer.commit(asynchronous=False)
    consumer.close()
    kp = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id="kp-group", enable_auto_commit=False)
    tp = TopicPartition(topic_name, 1)
    kp.commit({tp: OffsetAndMetadata(4, "checkpoint-4", 0)})
    kp.close()

    for how in ("graceful", "kill -9"):
        if how == "graceful":
            b.restart()
        else:
            b.kill()
            b.start()
        ck = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "ck-group"})
        committed = ck.committed([CkTopicPartition(topic_name, p) for p in range(3)], timeout=15)
        assert [c.offset for c in committed] == [10, 10, 10], how
        assert [c.leader_epoch for c in committed] == [0, 0, 0], how
        ck.close()
        kp = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id="kp-group", enable_auto_commit=False)
        assert kp.committed(tp, metadata=True) == OffsetAndMetadata(4, "checkpoint-4", 0), how
        kp.close()
    # A consumer of the group resumes after the committed offsets: nothing left to read.
    resumed = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "ck-group", "auto.offset.reset": "earliest"}
    )
    resumed.subscribe([topic_name])
    deadline = time.monotonic() + 4
    extra = 0
    while time.monotonic() < deadline:
        msg = resumed.poll(0.5)
        if msg is not None and not msg.error():
            extra += 1
    resumed.close()
    assert extra == 0


@pytest.mark.slow
def test_two_groups_read_the_same_topic_independently(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, 24)
    one = _consume_all(broker.bootstrap, topic_name, f"one-{topic_name}", 24)
    one.commit(asynchronous=False)
    two = _consume_all(broker.bootstrap, topic_name, f"two-{topic_name}", 24)
    parts = [CkTopicPartition(topic_name, p) for p in range(3)]
    assert [c.offset for c in one.committed(parts, timeout=10)] == [8, 8, 8]
    assert [c.offset for c in two.committed(parts, timeout=10)] == [-1001] * 3  # nothing committed
    one.close()
    two.close()


@pytest.mark.slow
def test_admin_client_lists_describes_and_deletes_groups(broker: BrokerProcess, topic_name: str) -> None:
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, 6)
    group = f"admin-{topic_name}"
    consumer = _consume_all(broker.bootstrap, topic_name, group, 6)
    consumer.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(15)
    assert group in {g.group_id for g in listed.valid}
    # librdkafka sends the state and type filters in ListGroups v5; only matching groups come back
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(15).valid
    assert group in {g.group_id for g in stable}
    assert {str(g.state) for g in stable} == {str(ConsumerGroupState.STABLE)}
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(15).valid
    assert group not in {g.group_id for g in empty}
    classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(15).valid
    assert group in {g.group_id for g in classic}
    assert admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(15).valid == []
    described = admin.describe_consumer_groups([group])[group].result(15)
    assert str(described.state).endswith("STABLE") and len(described.members) == 1
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1, 2}
    consumer.close()
    from confluent_kafka import ConsumerGroupTopicPartitions

    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 2), (1, 2), (2, 2)]
    admin.delete_consumer_groups([group])[group].result(15)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(15).valid}


@pytest.mark.slow
def test_aiokafka_group_consume_and_commit(broker: BrokerProcess, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer

    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, 9)
    group = f"aio-{topic_name}"

    async def run() -> dict[int, int]:
        consumer = AIOKafkaConsumer(
            topic_name,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            got = 0
            async with asyncio.timeout(30):
                while got < 9:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += sum(len(msgs) for msgs in batch.values())
            await consumer.commit()
            return {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == {0: 3, 1: 3, 2: 3}
