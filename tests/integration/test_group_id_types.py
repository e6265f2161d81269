"""One group id, one group type: a share group's id refuses classic and KIP-848 members, and a classic or
consumer group's id refuses share members, as Kafka 4 refuses them. One node over TCP, real clients:
kafka-python (classic), confluent-kafka's ``Consumer`` with ``group.protocol=consumer`` and its
``ShareConsumer``; raw requests check the exact answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import GroupIdNotFoundError, InconsistentGroupProtocolError

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import Consumer as Kip848Consumer
from tests.integration.kip848_clients import classic_join_body, join_body, wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import ShareConsumerProcess
from tests.integration.test_share_groups import CONFIGS

TOPIC = "one-type"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("group-id-types") / "data", CONFIGS)
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            future.result(30)
        yield proc
    finally:
        proc.kill()


def share_members(bootstrap: str, group: str) -> Any:
    with RawClient(bootstrap) as raw:
        (entry,) = raw.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group]})["groups"]
    return entry


def raw_join(bootstrap: str, group: str) -> Any:
    with RawClient(bootstrap) as raw:
        return raw.call(ApiKey.JOIN_GROUP, 5, classic_join_body(group, b"\x00\x00\x00\x00\x00\x00"))


def raw_consumer_heartbeat(bootstrap: str, group: str) -> Any:
    with RawClient(bootstrap) as raw:
        return raw.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join_body(group, "", [TOPIC]))


def raw_share_heartbeat(bootstrap: str, group: str) -> Any:
    body = {"group_id": group, "member_id": "", "member_epoch": 0, "rack_id": None}
    with RawClient(bootstrap) as raw:
        return raw.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {**body, "subscribed_topic_names": [TOPIC]})


def raw_offsets(bootstrap: str, group: str) -> tuple[int, int, int]:
    """(OffsetCommit's partition error, OffsetFetch's group error, OffsetDelete's error) for the group."""
    commit = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
    }
    topics = [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]
    with RawClient(bootstrap) as raw:
        committed = raw.call(ApiKey.OFFSET_COMMIT, 8, {**commit, "topics": topics})
        fetched = raw.call(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}]})
        deleted = raw.call(
            ApiKey.OFFSET_DELETE,
            0,
            {"group_id": group, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
        )
    ((partition,),) = [t["partitions"] for t in committed["topics"]]
    (fetched_group,) = fetched["groups"]
    return partition["error_code"], fetched_group["error_code"], deleted["error_code"]


def listed_types(bootstrap: str) -> dict[str, list[str]]:
    with RawClient(bootstrap) as raw:
        groups = raw.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})["groups"]
    types: dict[str, list[str]] = {}
    for g in groups:
        types.setdefault(g["group_id"], []).append(g["group_type"])
    return types


def kip848_fatal_error(bootstrap: str, group: str) -> KafkaError:
    """The error a KIP-848 consumer of that group meets (it is fatal: no retry makes the id free)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer"})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                error: KafkaError = message.error()
                return error
        raise AssertionError(f"no error within 60 s for group {group}")
    finally:
        consumer.close()


def share_consumer_errors(consumer: ShareConsumerProcess) -> list[str]:
    return [str(e["error"]) for e in consumer.snapshot() if e["ev"] == "error"]


def test_a_share_groups_id_refuses_classic_and_consumer_members(
    tmp_path: Path, broker: BrokerProcess
) -> None:
    bootstrap, group = broker.bootstrap, "one-type-share"
    share = ShareConsumerProcess(
        tmp_path, "share", {"bootstrap": bootstrap, "topics": [TOPIC], "group": group}
    )
    try:
        assert wait_until(lambda: len(share_members(bootstrap, group)["members"]) == 1, 60)

        classic = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group)
        try:
            with pytest.raises(InconsistentGroupProtocolError):
                classic.poll(timeout_ms=30_000)
        finally:
            classic.close()
        joined = raw_join(bootstrap, group)
        assert (joined["error_code"], joined["member_id"]) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")

        fatal = kip848_fatal_error(bootstrap, group)
        assert fatal.code() == KafkaError._FATAL and "group id does not exist" in fatal.str(), fatal
        refused = raw_consumer_heartbeat(bootstrap, group)
        assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert refused["error_message"] == f"Group {group} is not a consumer group."

        not_found = int(ErrorCode.GROUP_ID_NOT_FOUND)
        assert raw_offsets(bootstrap, group) == (not_found, not_found, not_found)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            with pytest.raises(GroupIdNotFoundError):
                admin.list_group_offsets(group)
        finally:
            admin.close()

        assert listed_types(bootstrap)[group] == ["share"]
        assert len(share_members(bootstrap, group)["members"]) == 1
        share.terminate()  # closes: the group is kept, Empty, and keeps its id
        assert wait_until(lambda: share_members(bootstrap, group)["group_state"] == "Empty", 60)
        assert raw_join(bootstrap, group)["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert raw_consumer_heartbeat(bootstrap, group)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert listed_types(bootstrap)[group] == ["share"]
    finally:
        share.kill()


def assert_share_members_refused(tmp_path: Path, bootstrap: str, group: str) -> None:
    share = ShareConsumerProcess(
        tmp_path, f"share-{group}", {"bootstrap": bootstrap, "topics": [TOPIC], "group": group}
    )
    try:
        assert wait_until(lambda: bool(share_consumer_errors(share)), 60), share.snapshot()
        (error, *_) = share_consumer_errors(share)
        assert "GROUP_ID_NOT_FOUND" in error and "ShareGroupHeartbeat" in error, error
    finally:
        share.kill()
    refused = raw_share_heartbeat(bootstrap, group)
    assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert refused["error_message"] == f"Group {group} is not a share group."
    assert "share" not in listed_types(bootstrap)[group]


def test_a_classic_groups_id_refuses_share_members(tmp_path: Path, broker: BrokerProcess) -> None:
    bootstrap, group = broker.bootstrap, "one-type-classic"
    classic = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group)
    try:
        assert wait_until(lambda: bool(classic.poll(timeout_ms=200) is not None and classic.assignment()), 60)
        assert_share_members_refused(tmp_path, bootstrap, group)
        assert listed_types(bootstrap)[group] == ["classic"]
    finally:
        classic.close()


def test_a_consumer_groups_id_refuses_share_members(tmp_path: Path, broker: BrokerProcess) -> None:
    bootstrap, group = broker.bootstrap, "one-type-consumer"
    member = Kip848Consumer(tmp_path, "kip848", {"bootstrap": bootstrap, "topics": [TOPIC], "group": group})
    try:
        assert wait_until(lambda: bool(member.partitions), 60), member.snapshot()
        assert_share_members_refused(tmp_path, bootstrap, group)
        assert listed_types(bootstrap)[group] == ["consumer"]
    finally:
        member.kill()
