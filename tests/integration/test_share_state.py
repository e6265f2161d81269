"""Durable share-partition state (KIP-932's share coordinator and ``__share_group_state``) on one node,
with confluent-kafka's ``ShareConsumer`` over TCP.

A consumer accepts records one commit at a time (each confirmed by the broker), then holds the next
records it gets without acknowledging them; the broker is killed with SIGKILL and started again on
its data. A new consumer of the group then gets every record that was not accepted (the held ones
and the ones never delivered), each once, and none of the accepted ones: without the share
coordinator the restarted broker would start the group over at ``share.auto.offset.reset`` (earliest
here) and deliver everything again. DescribeShareGroupOffsets (raw protocol: neither admin client has
it) reads the stored start offset: the first record not accepted after the restart, the end once the
new consumer accepted everything, -1 for a group that never read the partition; before
``__share_group_state`` exists it answers COORDINATOR_NOT_AVAILABLE at once (the topic's creation is
asked for, not waited for).

Releases are durable too: records a silent member held come back after a SIGKILL and restart with
that member's delivery counted, whether its locks ran out (released at the partition's next fetch)
or its idle share session was evicted (at the next share request the leader served).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import (
    ShareConsumerProcess,
    accept_then_hold,
    assert_the_rest_comes_once,
    share_consumers,  # noqa: F401  (the fixture)
)
from tests.integration.test_share_groups import CONFIGS as SHARE_CONFIGS
from tests.integration.test_share_groups import make_topic, produce, share_fetch, topic_id_of

# Held records come back by the restart, not by their locks running out.
CONFIGS = {**SHARE_CONFIGS, "group.share.record.lock.duration.ms": "60000"}
TOTAL, ACCEPT = 200, 60


def describe_offsets(
    bootstrap: str, group: str, topics: list[tuple[str, list[int]]] | None, version: int = 0
) -> Any:
    """The group's DescribeShareGroupOffsets answer (``topics`` None: the subscribed ones)."""
    asked = None if topics is None else [{"topic_name": t, "partitions": p} for t, p in topics]
    with RawClient(bootstrap) as raw:
        answer = raw.call(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version, {"groups": [{"group_id": group, "topics": asked}]}
        )
    (described,) = answer["groups"]
    return described


def start_offsets(described: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (error code, start offset) of a described group."""
    return {
        (t["topic_name"], p["partition_index"]): (p["error_code"], p["start_offset"])
        for t in described["topics"]
        for p in t["partitions"]
    }


def test_accepted_records_stay_accepted_across_a_broker_kill(
    tmp_path: Path,
    share_consumers: list[ShareConsumerProcess],  # noqa: F811
) -> None:
    topic, group = "durable-share", "durable-share-g"
    broker = BrokerProcess(tmp_path / "data", CONFIGS)
    broker.start()
    try:
        make_topic(broker.bootstrap, topic)
        produce(broker.bootstrap, topic, [f"v{i}" for i in range(TOTAL)])
        first = accept_then_hold(tmp_path, broker.bootstrap, topic, group, ACCEPT, share_consumers)
        first.kill()  # what it holds is neither acknowledged nor released
        broker.kill()
        broker.start()
        with RawClient(broker.bootstrap) as raw:
            listed = raw.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        internal = {t["name"]: t["is_internal"] for t in listed["topics"]}
        assert internal.get("__share_group_state") is True
        rest = set(range(TOTAL)) - first.confirmed_accepted()
        described = describe_offsets(broker.bootstrap, group, [(topic, [0]), ("no-such-topic", [0])])
        assert described["error_code"] == 0
        assert start_offsets(described) == {(topic, 0): (0, min(rest)), ("no-such-topic", 0): (3, -1)}
        never = describe_offsets(broker.bootstrap, "never-read", [(topic, [0])])
        assert start_offsets(never) == {(topic, 0): (0, -1)}
        assert_the_rest_comes_once(tmp_path, broker.bootstrap, topic, group, TOTAL, first, share_consumers)

        def all_accepted() -> bool:
            return start_offsets(describe_offsets(broker.bootstrap, group, None)) == {(topic, 0): (0, TOTAL)}

        assert wait_until(all_accepted, 30), describe_offsets(broker.bootstrap, group, None)
    finally:
        broker.stop()


def acquired(response: Any) -> list[tuple[int, int, int]]:
    """(first offset, last offset, delivery count) of a raw ShareFetch answer's one partition."""
    assert response["error_code"] == 0, response
    return [
        (r["first_offset"], r["last_offset"], r["delivery_count"])
        for t in response["responses"]
        for p in t["partitions"]
        for r in p["acquired_records"]
    ]


def first_acquisition(raw: RawClient, group: str, member: str, topic_id: bytes) -> list[tuple[int, int, int]]:
    """What ``member``'s share session acquires first. A fresh broker answers empty fetches until the
    share-partition has read its state (``__share_group_state`` created, its coordinator loaded), which
    can outlast one fetch's wait on a busy machine: fetch again in the same session, bounded."""
    deadline = time.monotonic() + 60
    epoch = 0
    while True:
        got = acquired(share_fetch(raw, group, member, epoch, topic_id, []))
        if got or time.monotonic() > deadline:
            return got
        epoch += 1


@pytest.mark.parametrize(
    "released_by",
    [{"group.share.record.lock.duration.ms": "1000"}, {"group.share.session.timeout.ms": "1000"}],
    ids=["lock-expiry", "session-eviction"],
)
def test_released_records_keep_their_delivery_count_across_a_broker_kill(
    tmp_path: Path, released_by: dict[str, str]
) -> None:
    long = {"group.share.record.lock.duration.ms": "60000", "group.share.session.timeout.ms": "60000"}
    broker = BrokerProcess(tmp_path / "data", {**SHARE_CONFIGS, **long, **released_by})
    broker.start()
    try:
        make_topic(broker.bootstrap, "released")
        make_topic(broker.bootstrap, "other")
        produce(broker.bootstrap, "released", [f"r{i}" for i in range(10)], per_flush=10)
        with RawClient(broker.bootstrap) as raw:
            released, other = topic_id_of(raw, "released"), topic_id_of(raw, "other")
            assert first_acquisition(raw, "g", "silent", released) == [(0, 9, 1)]
            time.sleep(1.5)  # past the 1 s lock or session timeout
            if "group.share.record.lock.duration.ms" in released_by:
                # Another member's fetch releases the expired records first, then acquires them.
                assert acquired(share_fetch(raw, "g", "next", 0, released, [])) == [(0, 9, 2)]
            else:
                # Any share request at the leader evicts the silent member's idle session first.
                assert acquired(share_fetch(raw, "g2", "elsewhere", 0, other, [])) == []
        broker.kill()
        broker.start()
        got: list[tuple[int, int, int]] = []

        def redelivered() -> bool:
            nonlocal got
            with RawClient(broker.bootstrap) as raw:
                got = acquired(share_fetch(raw, "g", f"after-{time.monotonic_ns()}", 0, released, []))
            return bool(got)

        assert wait_until(redelivered, 30)
        # The release (delivery count 1) was durable; the acquisition after it was not.
        assert got == [(0, 9, 2)]
    finally:
        broker.stop()


FENCED = int(ErrorCode.FENCED_LEADER_EPOCH)


def _read_state(raw: RawClient, group: str, topic_id: bytes, leader_epoch: int) -> Any:
    body = {
        "group_id": group,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": leader_epoch}]}],
    }
    return raw.call(ApiKey.READ_SHARE_GROUP_STATE, 0, body)["results"][0]["partitions"][0]


def _write_state(raw: RawClient, group: str, topic_id: bytes, leader_epoch: int, start: int) -> int:
    part = {"partition": 0, "state_epoch": 0, "leader_epoch": leader_epoch, "start_offset": start}
    body = {
        "group_id": group,
        "topics": [{"topic_id": topic_id, "partitions": [{**part, "state_batches": []}]}],
    }
    answer = raw.call(ApiKey.WRITE_SHARE_GROUP_STATE, 0, body)
    return int(answer["results"][0]["partitions"][0]["error_code"])


def test_a_new_leaders_read_fences_the_deposed_leaders_writes(tmp_path: Path) -> None:
    """ReadShareGroupState at a newer leader epoch stores that epoch (as Kafka's share coordinator does):
    the deposed leader's write after it is refused, so it cannot land between the new leader's read and
    its first write (which, built from the read, would undo an acknowledgement)."""
    broker = BrokerProcess(tmp_path / "data", SHARE_CONFIGS)
    broker.start()
    try:
        make_topic(broker.bootstrap, "fenced")
        produce(broker.bootstrap, "fenced", [f"f{i}" for i in range(5)], per_flush=5)
        with RawClient(broker.bootstrap) as raw:
            topic_id = topic_id_of(raw, "fenced")
            assert first_acquisition(raw, "g", "m", topic_id) == [(0, 4, 1)]  # state stored at 0
            assert _read_state(raw, "g", topic_id, 0)["error_code"] == 0
            assert _write_state(raw, "g", topic_id, 0, 2) == 0  # the leader at epoch 0 accepts 0-1
            new = _read_state(raw, "g", topic_id, 1)  # a new leader at epoch 1 reads...
            assert (new["error_code"], new["start_offset"]) == (0, 2)
            assert _write_state(raw, "g", topic_id, 0, 5) == FENCED  # ...and the old one is fenced
            assert _read_state(raw, "g", topic_id, 0)["error_code"] == FENCED
            assert _write_state(raw, "g", topic_id, 1, 3) == 0
            assert _read_state(raw, "g", topic_id, 1)["start_offset"] == 3
    finally:
        broker.stop()


def test_describing_offsets_before_the_state_topic_exists_does_not_wait_for_it(tmp_path: Path) -> None:
    """DescribeShareGroupOffsets on a broker where no share group has read yet: ``__share_group_state``
    does not exist, so no share coordinator does either. The request asks for the topic's creation and
    answers at once with COORDINATOR_NOT_AVAILABLE (it does not create it on its own path, nor wait
    for its share coordinator to load); once the topic exists the answer is the stored start offset
    (-1: nothing stored)."""
    broker = BrokerProcess(tmp_path / "data", SHARE_CONFIGS)
    broker.start()
    try:
        make_topic(broker.bootstrap, "not-read")
        first = describe_offsets(broker.bootstrap, "g", [("not-read", [0])])
        unavailable = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        assert start_offsets(first) == {("not-read", 0): (unavailable, -1)}

        def described() -> bool:
            return start_offsets(describe_offsets(broker.bootstrap, "g", [("not-read", [0])])) == {
                ("not-read", 0): (0, -1)
            }

        assert wait_until(described, 30), describe_offsets(broker.bootstrap, "g", [("not-read", [0])])
        with RawClient(broker.bootstrap) as raw:
            listed = raw.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert {t["name"]: t["is_internal"] for t in listed["topics"]}.get("__share_group_state") is True
    finally:
        broker.stop()
