"""The share-group offset admin (KIP-932) on three brokers and a real ZooKeeper, where the group's
coordinator, the partition's leader and the share-partition's share coordinator (one of three
``__share_group_state`` partitions) may be three different brokers: the group's coordinator reads and
replaces the stored state through the share persister, the leader that still holds the
share-partition reads it again once the first consumer closed, so the next consumer gets exactly the
records from the altered start offset; DeleteGroups removes the group's state from every share
coordinator (DeleteShareGroupState to the brokers leading a ``__share_group_state`` partition)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.cluster.test_cluster import create_topic
from tests.cluster.test_share_groups_cluster import SETTINGS as SHARE_SETTINGS
from tests.integration.rawclient import RawClient
from tests.integration.test_share_groups import produce
from tests.integration.test_share_offsets_admin import (
    TOTAL,
    alter_and_read_from_there,
    close_and_wait_accepted,
    delete_group,
    lags,
    read_all,
)

GROUP, TOPIC = "admin-workers", "admin-jobs"
SETTINGS = {**SHARE_SETTINGS, "share_coordinator_state_topic_num_partitions": "3"}


def coordinator_of(bootstrap: str, group: str) -> str:
    with RawClient(bootstrap.split(",", maxsplit=1)[0]) as raw:
        found = raw.call(ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
    assert found["error_code"] == 0, found
    return f"{found['host']}:{found['port']}"


def test_an_alter_reaches_the_leader_and_delete_groups_every_share_coordinator(
    make_cluster: Any, tmp_path: Path
) -> None:
    cluster: LocalCluster = make_cluster(3, **SETTINGS)
    create_topic(cluster.bootstrap, TOPIC, 1, 3, **{"min.insync.replicas": "2"})
    produce(cluster.bootstrap, TOPIC, [f"v{i}" for i in range(TOTAL)])
    first = read_all(tmp_path, cluster.bootstrap, TOPIC, GROUP, "first", range(TOTAL))
    try:
        coordinator = coordinator_of(cluster.bootstrap, GROUP)
        close_and_wait_accepted(coordinator, GROUP, TOPIC, first)
    finally:
        first.kill()

    alter_and_read_from_there(tmp_path, cluster.bootstrap, coordinator, TOPIC, GROUP)

    assert delete_group(coordinator, GROUP) == ErrorCode.NONE
    assert lags(coordinator, GROUP, TOPIC) == (0, -1, -1)
    assert delete_group(coordinator, GROUP) == ErrorCode.GROUP_ID_NOT_FOUND
