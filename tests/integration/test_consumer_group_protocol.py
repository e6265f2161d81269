"""ConsumerGroupHeartbeat (68) v0-v1 and ConsumerGroupDescribe (69) v0-v1 against a live broker over raw
TCP, version by version (docs/protocol.md#advertise-nothing-untested): joining (a member id generated
by the broker in v0, the client's own in v1), the assignment by topic id, heartbeats, fencing, the v1
regular expression, leaving, the describe of each version, OffsetCommit by member epoch, ListGroups,
DeleteGroups, OffsetFetch v9's member epoch check and the group-coordinator gauges of /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value

from .rawclient import RawClient

HEARTBEAT_V = range(2)
DESCRIBE_V = range(2)
RETRIABLE = (
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
)


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap) as client:
        yield client


def heartbeat(raw: RawClient, version: int, group: str, member: str, epoch: int, **fields: Any) -> Any:
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": -1,
        "subscribed_topic_names": None,
        "server_assignor": None,
        "topic_partitions": None,
        **fields,
    }
    if version >= 1:
        body.setdefault("subscribed_topic_regex", None)
    deadline = time.monotonic() + 30
    while True:  # the first group request creates __consumer_offsets, which then loads
        resp = raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, body)
        if ErrorCode(resp["error_code"]) not in RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.1)


def describe(raw: RawClient, version: int, group: str) -> Any:
    body = {"group_ids": [group], "include_authorized_operations": False}
    return raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, version, body)["groups"][0]


def topic_ids(raw: RawClient, group: str) -> dict[str, bytes]:
    """Topic ids as ConsumerGroupDescribe names them (Metadata below v10 carries none)."""
    found = {}
    for member in describe(raw, 0, group)["members"]:
        for tp in member["assignment"]["topic_partitions"] + member["target_assignment"]["topic_partitions"]:
            found[tp["topic_name"]] = bytes(tp["topic_id"])
    return found


def fetch_offset(
    raw: RawClient, version: int, group: str, topic: str, member: str | None, epoch: int
) -> tuple[int, int | None]:
    """OffsetFetch v8+ of partition 0 for one group: the group's error code and the committed offset."""
    asked = {"group_id": group, "member_id": member, "member_epoch": epoch}
    body = {"groups": [{**asked, "topics": [{"name": topic, "partition_indexes": [0]}]}]}
    (answer,) = raw.call(ApiKey.OFFSET_FETCH, version, body)["groups"]
    offsets = [p["committed_offset"] for t in answer["topics"] for p in t["partitions"]]
    return answer["error_code"], offsets[0] if offsets else None


@pytest.mark.parametrize("version", HEARTBEAT_V)
def test_heartbeat_join_beat_fence_leave(raw: RawClient, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 3) == 0
    group = f"g-{topic_name}"
    member = "" if version == 0 else f"client-made-{version}"
    joined = heartbeat(
        raw, version, group, member, 0, subscribed_topic_names=[topic_name], rebalance_timeout_ms=30_000
    )
    assert joined["error_code"] == 0, joined
    member_id = joined["member_id"]
    assert member_id and (version == 0 or member_id == member)
    assert joined["member_epoch"] == 1 and joined["heartbeat_interval_ms"] == 5000
    ids = topic_ids(raw, group)
    assert joined["assignment"]["topic_partitions"] == [
        {"topic_id": ids[topic_name], "partitions": [0, 1, 2]}
    ]
    owned = [{"topic_id": ids[topic_name], "partitions": [0, 1, 2]}]
    steady = heartbeat(raw, version, group, member_id, 1, topic_partitions=owned)
    assert steady["error_code"] == 0 and steady["member_epoch"] == 1 and steady["assignment"] is None
    assert heartbeat(raw, version, group, member_id, 7)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert heartbeat(raw, version, group, "stranger", 1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    # OffsetCommit carries the member epoch in its generation field.
    commit = {
        "group_id": group,
        "generation_id_or_member_epoch": 0,
        "member_id": member_id,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
    }
    stale = raw.call(ApiKey.OFFSET_COMMIT, 7, commit)
    assert stale["topics"][0]["partitions"][0]["error_code"] == ErrorCode.STALE_MEMBER_EPOCH
    good = raw.call(ApiKey.OFFSET_COMMIT, 7, {**commit, "generation_id_or_member_epoch": 1})
    assert good["topics"][0]["partitions"][0]["error_code"] == 0
    # OffsetFetch v9 checks the member and its epoch; v8, and v9 without a member (a tool), do not.
    assert fetch_offset(raw, 9, group, topic_name, member_id, 1) == (0, 5)
    assert fetch_offset(raw, 9, group, topic_name, member_id, 0) == (ErrorCode.STALE_MEMBER_EPOCH, None)
    assert fetch_offset(raw, 9, group, topic_name, "stranger", 1) == (ErrorCode.UNKNOWN_MEMBER_ID, None)
    assert fetch_offset(raw, 9, group, topic_name, None, -1) == (0, 5)
    assert fetch_offset(raw, 8, group, topic_name, None, -1) == (0, 5)
    # ListGroups names it once, as a consumer group, though its offsets sit beside the classic groups'.
    listed = [g for g in raw.call(ApiKey.LIST_GROUPS, 2, {})["groups"] if g["group_id"] == group]
    assert listed == [{"group_id": group, "protocol_type": "consumer"}]
    left = heartbeat(raw, version, group, member_id, -1)
    assert left["error_code"] == 0 and left["member_epoch"] == -1
    assert describe(raw, 0, group)["group_state"] == "Empty"
    # DeleteGroups: the empty consumer group goes, with its committed offsets.
    deleted = raw.call(ApiKey.DELETE_GROUPS, 1, {"groups_names": [group]})["results"]
    assert deleted == [{"group_id": group, "error_code": 0}]
    assert describe(raw, 0, group)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert all(g["group_id"] != group for g in raw.call(ApiKey.LIST_GROUPS, 2, {})["groups"])


def test_heartbeat_v1_regular_expression(raw: RawClient, topic_name: str) -> None:
    for suffix in ("a", "b"):
        assert raw.create_topic(f"{topic_name}-{suffix}", 1) == 0
    group = f"g-{topic_name}"
    bad = heartbeat(raw, 1, group, "m", 0, subscribed_topic_regex="(", rebalance_timeout_ms=1000)
    assert bad["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
    joined = heartbeat(
        raw,
        1,
        group,
        "m",
        0,
        subscribed_topic_names=[],
        subscribed_topic_regex=f"{topic_name}-.*",
        rebalance_timeout_ms=1000,
    )
    assert joined["error_code"] == 0 and len(joined["assignment"]["topic_partitions"]) == 2
    assert (
        heartbeat(raw, 1, group, "m", 0, subscribed_topic_names=["x"], server_assignor="sticky")["error_code"]
        == ErrorCode.UNSUPPORTED_ASSIGNOR
    )


@pytest.mark.parametrize("version", DESCRIBE_V)
def test_describe(raw: RawClient, broker: BrokerProcess, topic_name: str, version: int) -> None:
    assert raw.create_topic(topic_name, 2) == 0
    group = f"g-{topic_name}"
    heartbeat(raw, 1, group, "m1", 0, subscribed_topic_names=[topic_name], rebalance_timeout_ms=1000)
    described = describe(raw, version, group)
    assert described["error_code"] == 0
    assert (described["group_state"], described["group_epoch"], described["assignment_epoch"]) == (
        "Stable",
        1,
        1,
    )
    assert described["assignor_name"] == "uniform"
    (member,) = described["members"]
    assert member["member_id"] == "m1" and member["member_epoch"] == 1
    assert member["subscribed_topic_names"] == [topic_name]
    assert member["assignment"]["topic_partitions"][0]["topic_name"] == topic_name
    assert member["assignment"]["topic_partitions"][0]["partitions"] == [0, 1]
    assert member["assignment"] == member["target_assignment"]
    assert ("member_type" in member) == (version >= 1)
    if version >= 1:
        assert member["member_type"] == 1  # a consumer-protocol member
    # /metrics counts it among the coordinator's consumer groups, by state.
    if version == 0:
        assert broker.http_url is not None
        samples = scrape(broker.http_url)
        prefix = "kafka_server_group_coordinator_metrics"
        assert value(samples, f"{prefix}_group_count", protocol="consumer") >= 1
        assert value(samples, f"{prefix}_consumer_group_count", state="stable") >= 1
        assert f"{prefix}_classic_group_count" in samples
    busy = raw.call(ApiKey.DELETE_GROUPS, 1, {"groups_names": [group]})["results"]
    assert busy == [{"group_id": group, "error_code": ErrorCode.NON_EMPTY_GROUP}]
    unknown = describe(raw, version, f"{group}-unknown")
    assert unknown["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
