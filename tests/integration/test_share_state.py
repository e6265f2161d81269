"""Durable share-partition state (KIP-932's share coordinator and ``__share_group_state``) on one node,
with confluent-kafka's ``ShareConsumer`` over TCP.

A consumer accepts records one commit at a time (each confirmed by the broker), then holds the next
records it gets without acknowledging them; the broker is killed with SIGKILL and started again on
its data. A new consumer of the group then gets every record that was not accepted (the held ones
and the ones never delivered), each once, and none of the accepted ones: without the share
coordinator the restarted broker would start the group over at ``share.auto.offset.reset`` (earliest
here) and deliver everything again. DescribeShareGroupOffsets (raw protocol: neither admin client has
it) reads the stored start offset: the first record not accepted after the restart, the end once the
new consumer accepted everything, -1 for a group that never read the partition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
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
from tests.integration.test_share_groups import make_topic, produce

# Held records come back by the restart, not by their locks running out.
CONFIGS = {**SHARE_CONFIGS, "group.share.record.lock.duration.ms": "60000"}
TOTAL, ACCEPT = 200, 60


def describe_offsets(bootstrap: str, group: str, topics: list[tuple[str, list[int]]] | None) -> Any:
    """The group's DescribeShareGroupOffsets v0 answer (``topics`` None: the subscribed ones)."""
    asked = None if topics is None else [{"topic_name": t, "partitions": p} for t, p in topics]
    with RawClient(bootstrap) as raw:
        answer = raw.call(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, {"groups": [{"group_id": group, "topics": asked}]}
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
