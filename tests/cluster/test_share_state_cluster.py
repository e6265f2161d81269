"""Durable share-partition state (KIP-932) on three brokers and a real ZooKeeper: the leader of a
share group's partition is killed with SIGKILL after a consumer had records accepted and while it
holds others. The new leader reads the share-partition's state from the share coordinator
(``__share_group_state``, three replicas), so a new consumer gets every record not accepted, each
once, and none of the accepted ones (without it the new leader would start over at
``share.auto.offset.reset``, earliest here, and deliver everything again)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.test_share_groups_cluster import SETTINGS as SHARE_SETTINGS
from tests.integration.share_clients import (
    ShareConsumerProcess,
    accept_then_hold,
    assert_the_rest_comes_once,
    share_consumers,  # noqa: F401  (the fixture)
)
from tests.integration.test_share_groups import produce

GROUP, TOPIC = "durable-workers", "durable-jobs"
TOTAL, ACCEPT = 200, 60
SETTINGS = {
    **SHARE_SETTINGS,
    "group_share_record_lock_duration_ms": "60000",  # held records come back by the fail-over
    "share_coordinator_state_topic_num_partitions": "3",
}


def test_accepted_records_stay_accepted_when_the_leader_is_killed(
    make_cluster: Any,
    share_consumers: list[ShareConsumerProcess],  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster: LocalCluster = make_cluster(3, **SETTINGS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics(
        [NewTopic(TOPIC, 1, replica_assignment=[[0, 1, 2]], config={"min.insync.replicas": "2"})]
    )[TOPIC].result(30)
    produce(cluster.bootstrap, TOPIC, [f"v{i}" for i in range(TOTAL)])
    first = accept_then_hold(tmp_path, cluster.bootstrap, TOPIC, GROUP, ACCEPT, share_consumers)
    first.kill()
    leader = partitions_of(cluster.bootstrap, TOPIC)[0][0]
    cluster.brokers[leader].kill()
    wait_until(lambda: partitions_of(cluster.bootstrap, TOPIC)[0][0] not in (leader, -1), 60, "a new leader")
    assert_the_rest_comes_once(tmp_path, cluster.bootstrap, TOPIC, GROUP, TOTAL, first, share_consumers)
