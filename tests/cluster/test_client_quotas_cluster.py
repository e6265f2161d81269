"""Client quotas and dynamic broker configs on a 3-broker ZooKeeper cluster: a quota altered through one
broker is stored in ZooKeeper (Kafka's ``/config/clients/<id>``), described by every broker, and
applied by every broker: a producer writing to partitions led by all three is throttled by each of them
(librdkafka's statistics per broker), then, once the quota is removed, by none. A cluster-wide dynamic
default set through one broker is in force on all three."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.integration.quota_clients import produce_flat_out_to_each, strom_quotas
from tests.integration.test_dynamic_broker_config import set_cluster_default


def test_a_quota_set_through_one_broker_is_applied_by_every_broker(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(3, quota_window_num="2")
    topic = f"q-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, replica_assignment=[[0], [1], [2]])])[topic].result(30)
    wait_until(lambda: {p[0] for p in partitions_of(cluster.bootstrap, topic).values()} == {0, 1, 2})
    first = cluster.brokers[0].bootstrap
    entity = ("--entity-type", "clients", "--entity-name", "tenant-a")
    done = strom_quotas(first, "alter", *entity, "--add-config", "producer_byte_rate=20000")
    assert done.returncode == 0, done.stderr
    for broker in cluster.brokers.values():
        described = strom_quotas(broker.bootstrap, "describe", *entity)
        assert described.stdout == "Quota configs for client-id 'tenant-a' are producer_byte_rate=20000.0\n"
    run = produce_flat_out_to_each(cluster.bootstrap, topic, 3, "tenant-a", 8.0)
    assert {b for b, ms in run.throttle_ms.items() if ms > 0} == {0, 1, 2}, run.throttle_ms
    # Three leaders, each holding the client to 20 kB/s of its own: about 60 kB/s in all.
    assert run.rate(2.0, 8.0) < 3 * 20_000 * 1.5
    done = strom_quotas(
        cluster.brokers[2].bootstrap, "alter", *entity, "--delete-config", "producer_byte_rate"
    )
    assert done.returncode == 0, done.stderr
    free = produce_flat_out_to_each(cluster.bootstrap, topic, 3, "tenant-a", 3.0)
    assert not any(free.throttle_ms.values()), free.throttle_ms
    assert free.rate(0.0, 3.0) > 3 * 20_000 * 2


def test_a_cluster_wide_dynamic_default_reaches_every_broker(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = make_cluster(3)
    set_cluster_default(cluster.brokers[0].bootstrap, log_retention_ms="3600000")

    def in_force(broker_id: int) -> bool:
        admin = AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap})
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        found = admin.describe_configs([resource])[resource].result(30)["log.retention.ms"]
        return bool(
            found.value == "3600000" and found.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        )

    for broker_id in (0, 1, 2):
        wait_until(lambda b=broker_id: in_force(b), 20, f"the default on broker {broker_id}")
