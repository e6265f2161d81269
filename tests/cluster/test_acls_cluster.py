"""ACLs in a 3-broker ZooKeeper cluster: a change made through one broker is enforced by every broker.

The brokers talk to each other as User:ANONYMOUS over PLAINTEXT, so the cluster runs with
``allow.everyone.if.no.acl.found=true`` (the cluster resource and every topic without ACLs stay open)
and the tests add DENY rules, which bind everybody including the brokers' own principal.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient

from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import wait_until

ACLS = {
    "authorizer_class_name": "kafka.security.authorizer.AclAuthorizer",
    "allow_everyone_if_no_acl_found": "true",
}
EVERYTHING = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
)


def _produce_codes(bootstrap: str, topic: str, partitions: int) -> list[int]:
    codes: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": 8000,
            "enable.idempotence": False,
            "retries": 0,
        }
    )
    for p in range(partitions):
        producer.produce(
            topic,
            b"v",
            partition=p,
            on_delivery=lambda err, _m: codes.append(0 if err is None else err.code()),
        )
    producer.flush(20)
    return codes


def test_acl_change_on_one_broker_is_enforced_by_all(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(3, **ACLS)
    admins = {b: AdminClient({"bootstrap.servers": p.bootstrap}) for b, p in cluster.brokers.items()}
    for f in admins[0].create_topics([NewTopic("guarded", 3, 3), NewTopic("pre.x", 3, 3)]).values():
        f.result(30)
    wait_until(lambda: _produce_codes(cluster.bootstrap, "guarded", 3) == [0, 0, 0], what="open produce")

    deny = AclBinding(
        ResourceType.TOPIC,
        "guarded",
        ResourcePatternType.LITERAL,
        "User:*",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    prefixed = AclBinding(
        ResourceType.TOPIC,
        "pre.",
        ResourcePatternType.PREFIXED,
        "User:*",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    for f in admins[0].create_acls([deny]).values():
        f.result(15)
    for f in admins[1].create_acls([prefixed]).values():
        f.result(15)
    for broker_id, admin in admins.items():
        wait_until(
            lambda a=admin: len(a.describe_acls(EVERYTHING, request_timeout=10).result()) == 2,
            what=f"both ACLs on broker {broker_id}",
        )
    # Leaders are spread over the three brokers: each one refuses its partitions.
    assert _produce_codes(cluster.bootstrap, "guarded", 3) == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert _produce_codes(cluster.bootstrap, "pre.x", 3) == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3

    # Kafka's znodes, so Kafka's tools read the same ACLs.
    zk = KazooClient(hosts=cluster.zookeeper.connect)
    zk.start()
    try:
        data, _ = zk.get("/kafka-acl/Topic/guarded")
        assert json.loads(data) == {
            "version": 1,
            "acls": [{"principal": "User:*", "permissionType": "Deny", "operation": "Write", "host": "*"}],
        }
        assert zk.exists("/kafka-acl-extended/prefixed/Topic/pre.") is not None
        assert zk.get_children("/kafka-acl-changes") and zk.get_children("/kafka-acl-extended-changes")
    finally:
        zk.stop()

    removal = AclBindingFilter(
        ResourceType.TOPIC,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    removed = next(iter(admins[2].delete_acls([removal]).values())).result(15)
    assert sorted(b.name for b in removed) == ["guarded", "pre."]
    for broker_id, admin in admins.items():
        wait_until(
            lambda a=admin: a.describe_acls(EVERYTHING, request_timeout=10).result() == [],
            what=f"no ACL left on broker {broker_id}",
        )
    assert _produce_codes(cluster.bootstrap, "guarded", 3) == [0, 0, 0]
    assert _produce_codes(cluster.bootstrap, "pre.x", 3) == [0, 0, 0]
