"""The share-partitions a share group initialized (KIP-932's ShareGroupStatePartitionMetadata record)
are kept by its coordinator, so an empty group's offsets are described: one node over TCP,
confluent-kafka's ``ShareConsumer`` reads, DescribeShareGroupOffsets without topics and
``strom groups describe`` show what the group read.

Two topics are read by the group, whose consumers then close: the empty group still lists both with
their start offsets, after the broker's SIGKILL and restart too. DeleteShareGroupOffsets of one topic
drops it, the deletion of the other drops that one, and DeleteGroups ends the group.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient

from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import wait_until
from tests.integration.strom_cli import strom
from tests.integration.test_share_group_empty import described
from tests.integration.test_share_groups import CONFIGS
from tests.integration.test_share_offsets_admin import (
    TOTAL,
    close_and_wait_accepted,
    delete_group,
    delete_offsets,
    topic_codes,
    topic_read_by_a_consumer,
)
from tests.integration.test_share_state import describe_offsets, start_offsets


def read_and_close(tmp_path: Path, bootstrap: str, topic: str, group: str) -> None:
    consumer = topic_read_by_a_consumer(tmp_path, bootstrap, topic, group)
    try:
        close_and_wait_accepted(bootstrap, group, topic, consumer)
    finally:
        consumer.kill()


def initialized(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """DescribeShareGroupOffsets without topics: (topic, partition) -> (error code, start offset)."""
    answer = describe_offsets(bootstrap, group, None, version=1)
    assert answer["error_code"] == 0, answer
    return start_offsets(answer)


def cli_rows(bootstrap: str, group: str) -> list[list[str]]:
    """``strom groups describe``'s rows: topic, partition, start offset."""
    lines = strom(bootstrap, "groups", "describe", group)
    assert lines[0].lower().startswith(f"group {group}: type share, state empty, 0 member(s)"), lines
    return [line.split()[:3] for line in lines[2:]]


def test_an_empty_share_group_lists_the_partitions_it_read_until_they_are_deleted(tmp_path: Path) -> None:
    first, second, group = "share-init-a", "share-init-b", "share-init-g"
    broker = BrokerProcess(tmp_path / "data", CONFIGS)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        read_and_close(tmp_path, bootstrap, first, group)
        read_and_close(tmp_path, bootstrap, second, group)
        both = {(first, 0): (0, TOTAL), (second, 0): (0, TOTAL)}
        assert initialized(bootstrap, group) == both
        rows = [[first, "0", str(TOTAL)], [second, "0", str(TOTAL)]]
        assert cli_rows(bootstrap, group) == rows

        broker.kill()
        broker.start()
        bootstrap = broker.bootstrap
        # COORDINATOR_LOAD_IN_PROGRESS (and the share coordinators' COORDINATOR_NOT_AVAILABLE) until
        # the new coordinators replayed their partitions.
        assert wait_until(lambda: described(bootstrap, group)["error_code"] == 0, 30)
        assert wait_until(lambda: initialized(bootstrap, group) == both, 30), initialized(bootstrap, group)
        assert cli_rows(bootstrap, group) == rows

        assert topic_codes(delete_offsets(bootstrap, group, first)) == {first: 0}
        assert initialized(bootstrap, group) == {(second, 0): (0, TOTAL)}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.delete_topics([second])[second].result(30)
        assert wait_until(lambda: initialized(bootstrap, group) == {}, 30), initialized(bootstrap, group)

        assert delete_group(bootstrap, group) == 0
        assert described(bootstrap, group)["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert initialized(bootstrap, group) == {}
    finally:
        broker.kill()
