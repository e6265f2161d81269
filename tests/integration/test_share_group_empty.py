"""An empty share group (KIP-932) is kept, as Kafka keeps it: one node, confluent-kafka's
``ShareConsumer`` over TCP.

A consumer reads a topic and closes. The group stays, state Empty, at its group epoch:
ShareGroupDescribe and ``strom groups describe`` describe it, ListGroups and ``strom groups list`` show it
EMPTY. It survives the broker's SIGKILL and restart (its records in ``__consumer_offsets`` stay and the
new coordinator replays them). A new consumer rejoins it at the next group epoch; once that one closed
too, DeleteGroups deletes the group and its state, and it is gone from both the describe and the list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import ShareConsumerProcess
from tests.integration.strom_cli import strom
from tests.integration.test_share_groups import CONFIGS
from tests.integration.test_share_offsets_admin import (
    close_and_wait_accepted,
    delete_group,
    topic_read_by_a_consumer,
)


def described(bootstrap: str, group: str) -> Any:
    """The group's ShareGroupDescribe entry."""
    with RawClient(bootstrap) as raw:
        (group_entry,) = raw.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": [group]})["groups"]
    return group_entry


def listed(bootstrap: str) -> dict[str, list[str]]:
    """``strom groups list --type --state``: group -> [type, state]."""
    lines = strom(bootstrap, "groups", "list", "--type", "--state")
    return {line.split()[0]: line.split()[1:] for line in lines}


def assert_kept_empty(bootstrap: str, group: str, epoch: int) -> None:
    empty = described(bootstrap, group)
    assert (empty["error_code"], empty["group_state"], empty["members"]) == (0, "Empty", []), empty
    epochs = (empty["group_epoch"], empty["assignment_epoch"])
    assert (epochs, empty["assignor_name"]) == ((epoch, epoch), "simple")
    assert listed(bootstrap)[group] == ["SHARE", "EMPTY"]
    lines = strom(bootstrap, "groups", "describe", group)
    assert lines[0].startswith(f"Group {group}: type share, state EMPTY, 0 member(s), assignor simple"), lines


def test_an_empty_share_group_is_kept_across_a_restart_until_deleted(tmp_path: Path) -> None:
    topic, group = "share-kept", "share-kept-g"
    broker = BrokerProcess(tmp_path / "data", CONFIGS)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        first = topic_read_by_a_consumer(tmp_path, bootstrap, topic, group)
        try:
            close_and_wait_accepted(bootstrap, group, topic, first)  # ends once the group has no member
        finally:
            first.kill()
        epoch = described(bootstrap, group)["group_epoch"]
        assert epoch > 0
        assert_kept_empty(bootstrap, group, epoch)

        broker.kill()
        broker.start()
        bootstrap = broker.bootstrap
        # The new coordinator answers COORDINATOR_LOAD_IN_PROGRESS until it replayed its partition.
        loaded = wait_until(lambda: described(bootstrap, group)["error_code"] == 0, 30)
        assert loaded, described(bootstrap, group)
        assert_kept_empty(bootstrap, group, epoch)

        config = {"bootstrap": bootstrap, "topics": [topic], "group": group}
        second = ShareConsumerProcess(tmp_path, "second", config)
        try:

            def rejoined() -> bool:
                now = described(bootstrap, group)
                return now["error_code"] == 0 and [m["member_epoch"] for m in now["members"]] == [epoch + 1]

            assert wait_until(rejoined, 60), described(bootstrap, group)
            assert described(bootstrap, group)["group_state"] == "Stable"
            close_and_wait_accepted(bootstrap, group, topic, second)
        finally:
            second.kill()
        assert described(bootstrap, group)["group_state"] == "Empty"

        assert delete_group(bootstrap, group) == ErrorCode.NONE
        gone = described(bootstrap, group)
        assert (gone["error_code"], gone["group_state"]) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
        assert group not in listed(bootstrap)
        assert delete_group(bootstrap, group) == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        broker.stop()
