"""``group.consumer.migration.policy`` over raw TCP, one broker per policy: a ConsumerGroupHeartbeat
joining a classic group with members converts it only under ``upgrade`` (GROUP_ID_NOT_FOUND under
``disabled`` and ``downgrade``, as Kafka answers); a classic member joins a consumer group with members
under every policy (Kafka serves it there); when the consumer group's last consumer-protocol member
leaves, the group goes back to classic only under ``downgrade``. (``bidirectional``, the default, is
test_group_migration.py's.)"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.rawclient import RawClient
from tests.integration.test_consumer_group_protocol import heartbeat

TIMEOUT = {"rebalance_timeout_ms": 30_000}


@pytest.fixture(scope="module", params=["disabled", "upgrade", "downgrade"])
def policy_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, BrokerProcess]]:
    policy = str(request.param)
    proc = BrokerProcess(
        tmp_path_factory.mktemp(f"policy-{policy}") / "data",
        {"group.initial.rebalance.delay.ms": "0", "group.consumer.migration.policy": policy},
    )
    proc.start()
    try:
        yield policy, proc
    finally:
        proc.stop()


def subscription(topic: str) -> bytes:
    """A version 0 ``ConsumerProtocolSubscription`` of one topic, without user data."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def join(raw: RawClient, group: str, topic: str, member_id: str = "") -> Any:
    body = {
        "group_id": group,
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 30_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(topic)}],
    }
    return raw.call(ApiKey.JOIN_GROUP, 3, body)  # v3: no MEMBER_ID_REQUIRED round trip


def group_type(raw: RawClient, group: str) -> list[str]:
    listed: Any = raw.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    return [g["group_type"] for g in listed["groups"] if g["group_id"] == group]


def wait_for_type(raw: RawClient, group: str, wanted: str) -> list[str]:
    deadline = time.monotonic() + 20
    while (found := group_type(raw, group)) != [wanted] and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def wait_for_coordinator(raw: RawClient, topic: str, groups: list[str]) -> None:
    """Create ``__consumer_offsets`` (a first group request) and wait until the groups' partitions of
    it are loaded: OffsetFetch answers them without NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
    warm = heartbeat(raw, 0, f"warm-{topic}", "", 0, subscribed_topic_names=[topic], **TIMEOUT)
    assert warm["error_code"] == 0, warm
    asked = [{"group_id": g, "member_id": None, "member_epoch": -1, "topics": None} for g in groups]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answers = raw.call(ApiKey.OFFSET_FETCH, 8, {"groups": asked})["groups"]
        if all(a["error_code"] == 0 for a in answers):
            return
        time.sleep(0.1)
    raise AssertionError(f"the coordinator of {groups} did not load")


def test_policy(policy_broker: tuple[str, BrokerProcess]) -> None:
    policy, broker = policy_broker
    topic = f"pol-{uuid.uuid4().hex[:8]}"
    classic_group, consumer_group = f"up-{uuid.uuid4().hex[:8]}", f"down-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(topic, 2) == 0
        wait_for_coordinator(raw, topic, [classic_group, consumer_group])

        # A running classic group, and a consumer-protocol member asking to join it.
        joined = join(raw, classic_group, topic)
        assert joined["error_code"] == 0, joined
        sync = {
            "group_id": classic_group,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "assignments": [{"member_id": joined["member_id"], "assignment": b""}],
        }
        assert raw.call(ApiKey.SYNC_GROUP, 3, sync)["error_code"] == 0
        newcomer = heartbeat(
            raw, 0, classic_group, "", 0, subscribed_topic_names=[topic], rebalance_timeout_ms=30_000
        )
        if policy == "upgrade":
            assert newcomer["error_code"] == 0, newcomer
            assert group_type(raw, classic_group) == ["consumer"]
        else:
            assert newcomer["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND, newcomer
            assert group_type(raw, classic_group) == ["classic"]

        # A consumer group; a classic member joins it (any policy); the consumer member leaves.
        first = heartbeat(
            raw, 0, consumer_group, "", 0, subscribed_topic_names=[topic], rebalance_timeout_ms=30_000
        )
        assert first["error_code"] == 0, first
        classic_member = join(raw, consumer_group, topic)
        assert classic_member["error_code"] == 0, classic_member
        assert classic_member["leader"] == "" and classic_member["protocol_name"] == "range"
        # ConsumerGroupDescribe v1 tells the members' types apart (0 classic, 1 consumer).
        body = {"group_ids": [consumer_group], "include_authorized_operations": False}
        (group,) = raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)["groups"]
        types = {m["member_id"]: m["member_type"] for m in group["members"]}
        assert types == {first["member_id"]: 1, classic_member["member_id"]: 0}, types
        # DescribeGroups (the classic API) describes the consumer group as Kafka does.
        body = {"groups": [consumer_group], "include_authorized_operations": False}
        (described,) = raw.call(ApiKey.DESCRIBE_GROUPS, 5, body)["groups"]
        assert (described["error_code"], described["protocol_type"], described["protocol_data"]) == (
            0,
            "consumer",
            "uniform",
        )
        assert described["group_state"] in ("assigning", "reconciling", "stable"), described
        members = {m["member_id"]: m for m in described["members"]}
        assert set(members) == {first["member_id"], classic_member["member_id"]}
        for m in members.values():
            subscribed = ConsumerProtocolSubscription.decode(bytes(m["member_metadata"]))
            assert list(subscribed.topics) == [topic]
            ConsumerProtocolAssignment.decode(bytes(m["member_assignment"]))
        assert group_type(raw, consumer_group) == ["consumer"]
        left = heartbeat(raw, 0, consumer_group, first["member_id"], -1)
        assert left["error_code"] == 0, left
        wanted = "classic" if policy == "downgrade" else "consumer"
        assert wait_for_type(raw, consumer_group, wanted) == [wanted]
