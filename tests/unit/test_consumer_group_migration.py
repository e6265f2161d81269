"""Online migration's pure parts (`strom.coordinator.consumer.classic`): the embedded consumer protocol
cross-checked with kafka-python's codec, a classic group converted to a consumer group and back by the
records it writes, a classic member's join, sync and heartbeat answers, and classic member metadata in
the member record; and a downgrade written through the coordinator runtime whose wait fails."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from tests.unit.test_coordinator_runtime import TOPIC, MemoryPartitions, settle

from strom._util.clock import ManualClock
from strom.broker.coordinators.consumer_group_shard import ConsumerGroupShard
from strom.coordinator.consumer import assignors
from strom.coordinator.consumer.classic import (
    classic_member,
    downgrade_records,
    encode_assignment,
    heartbeat_error,
    join_request,
    parse_assignment,
    parse_subscription,
    supports_classic_protocols,
    sync_error,
    upgrade_records,
)
from strom.coordinator.consumer.heartbeat import ConsumerGroupConfig, HeartbeatRequest, heartbeat
from strom.coordinator.consumer.model import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    commit_error,
    fetch_error,
)
from strom.coordinator.consumer.records import (
    CONSUMER_KEY_VERSIONS,
    ClassicMemberMetadata,
    ConsumerKey,
    MemberMetadataValue,
    decode_key,
    decode_value,
    encode_value,
    key_version,
)
from strom.coordinator.group import Group, Member
from strom.coordinator.records import GroupMetadataValue
from strom.coordinator.records import decode_key as classic_decode_key
from strom.coordinator.records import decode_value as classic_decode_value
from strom.coordinator.state import GroupState
from strom.coordinator_runtime import CoordinatorError, CoordinatorResult, CoordinatorRuntime, ShardContext
from strom.protocol.errors import ErrorCode

TOPICS = {"t": 4}
CONFIG = ConsumerGroupConfig(assignors=(assignors.UNIFORM,))


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None) -> bytes:
    sub = ConsumerProtocolSubscription
    if owned is None:
        return bytes(sub(version=0, topics=topics, user_data=None).encode(version=0))
    parts = [sub.TopicPartition(topic=t, partitions=ps) for t, ps in owned.items()]
    return bytes(sub(version=1, topics=topics, user_data=b"", owned_partitions=parts).encode(version=1))


def assignment(parts: dict[str, list[int]]) -> bytes:
    tps = [ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in parts.items()]
    return bytes(
        ConsumerProtocolAssignment(version=0, assigned_partitions=tps, user_data=b"").encode(version=0)
    )


def replay(
    group: ConsumerGroup, records: list[tuple[bytes, bytes | None]]
) -> list[GroupMetadataValue | None]:
    """Apply the consumer-group records; return the classic group records' values."""
    classic: list[GroupMetadataValue | None] = []
    for key, value in records:
        if key_version(key) in (0, 1, 2):
            decoded = classic_decode_value(classic_decode_key(key), value) if value is not None else None
            assert decoded is None or isinstance(decoded, GroupMetadataValue)
            classic.append(decoded)
            continue
        ck = decode_key(key)
        group.replay(ck, None if value is None else decode_value(ck, value))
    return classic


def classic_group(generation: int = 3) -> Group:
    group = Group("g", state=GroupState.STABLE, generation_id=generation, protocol_type="consumer")
    group.protocol_name = "range"
    for member_id, parts in (("a", [0, 1]), ("b", [2, 3])):
        group.add(
            Member(
                member_id,
                None,
                f"client-{member_id}",
                "/127.0.0.1",
                30_000,
                10_000,
                "consumer",
                (("range", subscription(["t"])), ("roundrobin", subscription(["t"]))),
                assignment=assignment({"t": parts}),
            )
        )
    return group


def test_embedded_protocol_matches_kafka_python() -> None:
    parsed = parse_subscription(subscription(["t", "u"], {"t": [0, 2]}))
    assert parsed.topics == ("t", "u") and parsed.owned == (("t", 0), ("t", 2))
    assert parse_subscription(subscription(["x"])).owned == ()
    encoded = encode_assignment({"t": frozenset({3, 1}), "u": frozenset()})
    decoded = ConsumerProtocolAssignment.decode(encoded)
    assert [(tp.topic, tp.partitions) for tp in decoded.assigned_partitions] == [("t", [1, 3])]
    assert parse_assignment(encoded) == {"t": frozenset({1, 3})}
    assert parse_assignment(b"") == {}


def test_classic_member_metadata_round_trips_in_the_member_record() -> None:
    value = MemberMetadataValue(None, None, "c", "/h", ("t",), None, None, 30_000)
    classic = MemberMetadataValue(
        None,
        None,
        "c",
        "/h",
        ("t",),
        None,
        None,
        30_000,
        ClassicMemberMetadata(10_000, (("range", b"\x00x"),)),
    )
    key = ConsumerKey(5, "g", "m")
    assert decode_value(key, encode_value(value)) == value
    assert decode_value(key, encode_value(classic)) == classic
    assert encode_value(value)[:2] == b"\x00\x00" and encode_value(classic)[:2] == b"\x00\x01"


def test_upgrade_keeps_each_member_on_what_it_owns_then_a_newcomer_rebalances() -> None:
    group = ConsumerGroup("g")
    emptied = replay(group, upgrade_records(classic_group(), TOPICS))
    assert emptied and emptied[0] is not None and emptied[0].members == ()
    assert group.group_epoch == group.assignment_epoch == 3
    assert {m: dict(x.assigned) for m, x in group.members.items()} == {
        "a": {"t": frozenset({0, 1})},
        "b": {"t": frozenset({2, 3})},
    }
    assert all(m.uses_classic_protocol and m.member_epoch == 3 for m in group.members.values())
    assert heartbeat_error(group, group.members["a"]) is ErrorCode.NONE

    joined = heartbeat(
        group,
        HeartbeatRequest("g", "c", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=30_000),
        TOPICS,
        CONFIG,
    )
    assert joined.error is ErrorCode.NONE and joined.member_epoch == 4
    replay(group, joined.records)
    # The newcomer waits for partitions the classic members still own; they are told to rejoin.
    assert group.members["c"].state is MemberState.UNRELEASED_PARTITIONS
    assert heartbeat_error(group, group.members["a"]) is ErrorCode.REBALANCE_IN_PROGRESS
    assert sync_error(group, group.members["a"], "consumer", "range") is ErrorCode.REBALANCE_IN_PROGRESS

    # An eager classic member rejoins owning nothing: it gets its target at the new epoch.
    rejoin = join_request(group, "a", None, classic_group().members["a"].protocols, 10_000, 30_000, "c", "/h")
    assert rejoin.member_epoch == 3 and rejoin.owned == ()
    outcome = heartbeat(group, rejoin, TOPICS, CONFIG)
    assert outcome.error is ErrorCode.NONE and outcome.member is not None
    replay(group, outcome.records)
    a = group.members["a"]
    assert a.member_epoch == 4 and a.uses_classic_protocol
    assert set(a.assigned.get("t", ())) == set(group.target["a"].get("t", ()))
    assert classic_member(group, "a", None, 3) is ErrorCode.ILLEGAL_GENERATION
    assert classic_member(group, "c", None, 4) is ErrorCode.UNKNOWN_MEMBER_ID  # not a classic member
    assert classic_member(group, "a", None, 4) is a
    assert sync_error(group, a, "consumer", "range") is ErrorCode.NONE
    assert sync_error(group, a, "consumer", "sticky") is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert supports_classic_protocols(group, "consumer", ["roundrobin"])
    assert not supports_classic_protocols(group, "consumer", ["sticky"])
    assert not supports_classic_protocols(group, "connect", ["range"])


def test_downgrade_writes_the_classic_members_back() -> None:
    group = ConsumerGroup("g")
    replay(group, upgrade_records(classic_group(generation=5), TOPICS))
    joined = heartbeat(
        group,
        HeartbeatRequest("g", "c", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=30_000),
        TOPICS,
        CONFIG,
    )
    replay(group, joined.records)
    assert group.classic_only_without("c") and not group.classic_only_without("a")
    owned_by_a = dict(group.members["a"].assigned)
    (value,) = replay(group, downgrade_records(group, "c", now_ms=1))
    assert group.deleted and not group.members
    assert value is not None and value.generation == 6 and value.protocol_name == "range"
    assert [m.member_id for m in value.members] == ["a", "b"]
    assert [m.session_timeout_ms for m in value.members] == [10_000, 10_000]
    assert parse_assignment(value.members[0].assignment) == owned_by_a


def test_a_classic_members_wrong_epoch_is_an_illegal_generation_in_commits_and_fetches() -> None:
    """Kafka's validateMemberEpoch: a classic member's epoch is its generation."""
    group = ConsumerGroup("g")
    classic = ConsumerMember("c", member_epoch=3, classic=ClassicMemberMetadata(10_000, (("range", b""),)))
    group.members = {"c": classic, "k": ConsumerMember("k", member_epoch=3)}
    assert commit_error(group, "c", 2) is fetch_error(group, "c", 2) is ErrorCode.ILLEGAL_GENERATION
    assert commit_error(group, "k", 2) is fetch_error(group, "k", 2) is ErrorCode.STALE_MEMBER_EPOCH
    assert commit_error(group, "c", 3) is fetch_error(group, "c", 3) is ErrorCode.NONE


class _GroupsShard:
    """The consumer-group part of a ``__consumer_offsets`` shard, as `GroupShard` feeds it."""

    def __init__(self, context: ShardContext, downgraded: list[str]) -> None:
        self.consumer = ConsumerGroupShard(context, CONFIG, lambda: TOPICS, downgraded.append)

    def replay(
        self, offset: int, producer_id: int, producer_epoch: int, key: bytes | None, value: bytes | None
    ) -> None:
        if key is not None and key_version(key) in CONSUMER_KEY_VERSIONS:
            self.consumer.replay(key, value)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        pass

    def on_loaded(self) -> None:
        self.consumer.on_loaded()

    def on_unloaded(self) -> None:
        self.consumer.on_unloaded()


def _remove_newcomer(shard: _GroupsShard) -> CoordinatorResult[None]:
    records, done = shard.consumer.removal(shard.consumer.groups["g"], "c")
    return CoordinatorResult(records, None, on_complete=done)


@pytest.mark.parametrize("refused", [False, True])
def test_a_downgrade_whose_write_fails_after_its_append_still_starts_the_classic_group(refused: bool) -> None:
    """The runtime applies a write at its append: when the wait for the ISR then times out, the classic
    group exists all the same, so it is handed over (its members get sessions and a rebalance); a
    refused append changed nothing, and nothing is handed over."""
    seeded = ConsumerGroup("g")
    records = upgrade_records(classic_group(), TOPICS)
    replay(seeded, records)
    request = HeartbeatRequest("g", "c", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=30_000)
    records += heartbeat(seeded, request, TOPICS, CONFIG).records
    downgraded: list[str] = []

    async def scenario() -> None:
        ports = MemoryPartitions()
        runtime = CoordinatorRuntime(
            TOPIC, ManualClock(), ports, ports, lambda c: _GroupsShard(c, downgraded)
        )
        runtime.on_leadership_change(0, 1, True)
        await runtime.write(0, lambda _shard: CoordinatorResult(records, None), 1_000)
        assert set(runtime.shard(0).consumer.groups["g"].members) == {"a", "b", "c"}

        if refused:
            ports.refuse = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            ports.auto_commit = False
        write = asyncio.ensure_future(runtime.write(0, _remove_newcomer, 1_000))
        await settle()  # the write waits for the ISR
        ports.fail_waits(0, ErrorCode.REQUEST_TIMED_OUT)
        with pytest.raises(CoordinatorError):
            await write
        groups = runtime.shard(0).consumer.groups
        assert ("g" in groups) is refused
        assert downgraded == ([] if refused else ["g"])
        await runtime.close()

    asyncio.run(scenario())
