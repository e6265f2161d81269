"""The share-group offset admin (KIP-932) on one node, over TCP: confluent-kafka's ``ShareConsumer``
reads, and AlterShareGroupOffsets, DeleteShareGroupOffsets, DescribeShareGroupOffsets v1 and
DeleteGroups go as raw requests (confluent-kafka 2.16's admin client has none of them for share groups).

While a consumer is in the group every change is refused with NON_EMPTY_GROUP. Once it closed (its
share session at the leader closed with it), an alter moves the group's start offset back: a new
consumer gets exactly the records from there, although the leader still held the share-partition in
memory at the old start. Deleting the offsets makes the next consumer start over at
``share.auto.offset.reset`` (earliest here), and DeleteGroups removes what the group stored.

``strom groups`` does the same as a user would: ``list --type --state`` and ``describe`` show the share
group with its members, start offset and lag, ``reset-offsets --execute`` and ``delete-offsets`` change
an empty one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import ShareConsumerProcess
from tests.integration.strom_cli import strom
from tests.integration.test_share_groups import (
    broker,  # noqa: F401  (the module's broker)
    make_topic,
    produce,
)
from tests.integration.test_share_state import describe_offsets

TOTAL, RESET_TO = 100, 40


def lags(bootstrap: str, group: str, topic: str) -> tuple[int, int, int]:
    """(error code, start offset, lag) of partition 0 by DescribeShareGroupOffsets v1."""
    described = describe_offsets(bootstrap, group, [(topic, [0])], version=1)
    assert described["error_code"] == 0, described
    ((part,),) = [t["partitions"] for t in described["topics"]]
    return part["error_code"], part["start_offset"], part["lag"]


def alter(bootstrap: str, group: str, topic: str, start: int) -> Any:
    body = {
        "group_id": group,
        "topics": [{"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": start}]}],
    }
    with RawClient(bootstrap) as raw:
        return raw.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, body)


def delete_offsets(bootstrap: str, group: str, topic: str) -> Any:
    with RawClient(bootstrap) as raw:
        return raw.call(
            ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {"group_id": group, "topics": [{"topic_name": topic}]}
        )


def delete_group(bootstrap: str, group: str) -> int:
    with RawClient(bootstrap) as raw:
        answer = raw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
    ((name, code),) = [(r["group_id"], r["error_code"]) for r in answer["results"]]
    assert name == group
    return int(code)


def topic_codes(answer: Any) -> dict[str, int]:
    """DeleteShareGroupOffsets' answer, one error per topic (Kafka 4.1's layout)."""
    return {t["topic_name"]: t["error_code"] for t in answer["responses"]}


def partition_codes(answer: Any) -> dict[tuple[str, int], int]:
    return {
        (t["topic_name"], p["partition_index"]): p["error_code"]
        for t in answer["responses"]
        for p in t["partitions"]
    }


def read_all(
    tmp_path: Path, bootstrap: str, topic: str, group: str, name: str, expected: range
) -> ShareConsumerProcess:
    """A consumer that reads until it has every offset of ``expected``; each exactly once, none
    outside it. Still running when returned."""
    consumer = ShareConsumerProcess(
        tmp_path, name, {"bootstrap": bootstrap, "topics": [topic], "group": group}
    )
    try:
        got = wait_until(lambda: set(consumer.offsets()) >= set(expected), 60)
        assert got, sorted(set(expected) - set(consumer.offsets()))[:20]
        offsets = Counter(consumer.offsets())
        assert sorted(offsets) == list(expected), (
            f"outside {expected}: {sorted(set(offsets) - set(expected))}"
        )
        assert set(offsets.values()) == {1}
    except BaseException:
        consumer.kill()
        raise
    return consumer


def members(bootstrap: str, group: str) -> int:
    """The share group's members by ShareGroupDescribe (0 for a group the coordinator does not know)."""
    with RawClient(bootstrap) as raw:
        (described,) = raw.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group]})["groups"]
    return len(described["members"]) if described["error_code"] == 0 else 0


def close_and_wait_accepted(bootstrap: str, group: str, topic: str, consumer: ShareConsumerProcess) -> None:
    """Every record is accepted (the start offset reached the end), then the consumer closes and the
    group is empty."""
    accepted = wait_until(lambda: lags(bootstrap, group, topic)[1:] == (TOTAL, 0), 30)
    assert accepted, lags(bootstrap, group, topic)
    consumer.terminate()
    assert any(e["ev"] == "closed" for e in consumer.snapshot()), consumer.snapshot()[-3:]
    assert wait_until(lambda: members(bootstrap, group) == 0, 30)


def alter_and_read_from_there(
    tmp_path: Path, bootstrap: str, coordinator: str, topic: str, group: str
) -> None:
    """Alter the empty group's start offset back to RESET_TO at its coordinator: a new consumer then
    gets exactly the records from there (the leader still held the share-partition at TOTAL, and reads
    the altered state), and closes once it accepted them."""
    answer = alter(coordinator, group, topic, RESET_TO)
    assert answer["error_code"] == 0 and partition_codes(answer) == {(topic, 0): 0}, answer
    assert lags(coordinator, group, topic) == (0, RESET_TO, TOTAL - RESET_TO)
    second = read_all(tmp_path, bootstrap, topic, group, "second", range(RESET_TO, TOTAL))
    try:
        close_and_wait_accepted(coordinator, group, topic, second)
    finally:
        second.kill()


def topic_read_by_a_consumer(tmp_path: Path, bootstrap: str, topic: str, group: str) -> ShareConsumerProcess:
    """A new topic with TOTAL records, and a consumer of the group that read them all (still running);
    before it, nothing was stored for the group."""
    make_topic(bootstrap, topic)
    produce(bootstrap, topic, [f"v{i}" for i in range(TOTAL)])
    # COORDINATOR_NOT_AVAILABLE until __share_group_state, whose creation the first describe asks for,
    # exists: the client retries.
    assert wait_until(lambda: lags(bootstrap, group, topic) == (0, -1, -1), 30), lags(bootstrap, group, topic)
    return read_all(tmp_path, bootstrap, topic, group, "first", range(TOTAL))


def test_alter_and_delete_offsets_of_an_empty_share_group(
    broker: BrokerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    topic, group, bootstrap = "share-admin", "share-admin-g", broker.bootstrap
    first = topic_read_by_a_consumer(tmp_path, bootstrap, topic, group)
    try:
        assert alter(bootstrap, group, topic, RESET_TO)["error_code"] == ErrorCode.NON_EMPTY_GROUP
        assert delete_offsets(bootstrap, group, topic)["error_code"] == ErrorCode.NON_EMPTY_GROUP
        assert delete_group(bootstrap, group) == ErrorCode.NON_EMPTY_GROUP
        close_and_wait_accepted(bootstrap, group, topic, first)
    finally:
        first.kill()

    unknown = alter(bootstrap, group, "no-such-topic", 0)
    assert partition_codes(unknown) == {("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    alter_and_read_from_there(tmp_path, bootstrap, bootstrap, topic, group)

    assert topic_codes(delete_offsets(bootstrap, group, "no-such-topic")) == {
        "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    answer = delete_offsets(bootstrap, group, topic)
    assert answer["error_code"] == 0 and topic_codes(answer) == {topic: 0}, answer
    assert lags(bootstrap, group, topic) == (0, -1, -1)
    third = read_all(tmp_path, bootstrap, topic, group, "third", range(TOTAL))  # earliest again
    try:
        close_and_wait_accepted(bootstrap, group, topic, third)
    finally:
        third.kill()

    assert delete_group(bootstrap, group) == ErrorCode.NONE
    assert lags(bootstrap, group, topic) == (0, -1, -1)
    assert delete_group(bootstrap, group) == ErrorCode.GROUP_ID_NOT_FOUND
    # A share group that no longer exists (or never did) has no offsets to delete, as Kafka answers.
    for never in (group, "never-a-group"):
        assert delete_offsets(bootstrap, never, topic)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_strom_groups_shows_resets_and_deletes_share_group_offsets(
    broker: BrokerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    topic, group, bootstrap = "share-cli", "share-cli-g", broker.bootstrap
    consumer = topic_read_by_a_consumer(tmp_path, bootstrap, topic, group)
    try:
        assert wait_until(lambda: lags(bootstrap, group, topic)[1:] == (TOTAL, 0), 30)
        listed = {
            line.split()[0]: line.split()[1:]
            for line in strom(bootstrap, "groups", "list", "--type", "--state")
        }
        assert listed[group] == ["SHARE", "STABLE"]
        described = strom(bootstrap, "groups", "describe", group)
        assert described[0].startswith(f"Group {group}: type share, state STABLE, 1 member(s)"), described
        assert described[1].split()[:5] == ["TOPIC", "PARTITION", "START-OFFSET", "LAG", "MEMBERS"]
        assert [line.split()[:5] for line in described[2:]] == [[topic, "0", str(TOTAL), "0", "1"]]
        close_and_wait_accepted(bootstrap, group, topic, consumer)
    finally:
        consumer.kill()

    reset = ["groups", "reset-offsets", group, "--topic", topic, "--to-offset", str(RESET_TO)]
    assert strom(bootstrap, *reset)[1].split() == [group, topic, "0", str(RESET_TO)]
    assert lags(bootstrap, group, topic)[1] == TOTAL  # a dry run changes nothing
    strom(bootstrap, *reset, "--execute")
    assert lags(bootstrap, group, topic) == (0, RESET_TO, TOTAL - RESET_TO)
    deleted = strom(bootstrap, "groups", "delete-offsets", group, "--topic", topic)
    assert deleted == [f"Deleted the offsets of share group {group} on topic {topic}."]
    assert lags(bootstrap, group, topic) == (0, -1, -1)
