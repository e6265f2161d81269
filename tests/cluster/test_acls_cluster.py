"""ACLs in a 3-broker ZooKeeper cluster: a change made through one broker is enforced by every broker.

Everything runs over SASL_PLAINTEXT with PLAIN: clients log in as ``User:admin`` (a super user) and
``User:alice``; the brokers log in to each other as ``User:broker``, which is a super user too (the
brokers' own principal must be one, or hold CLUSTER_ACTION). ``allow.everyone.if.no.acl.found=false``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import FAST, wait_until
from tests.integration.acl_clients import EVERYTHING, acl_filter, binding, grant
from tests.prerequisites import require_zookeeper

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SETTINGS = {
    "listeners": "CLIENT://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "CLIENT",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.client.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin;User:broker",
    "allow.everyone.if.no.acl.found": "false",
}


def _login(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def _produce_codes(conf: dict[str, Any], topic: str, partitions: int) -> list[int]:
    """The brokers' answers to one record per partition. A delivery report with a local (negative)
    librdkafka error, such as _DESTROY or _TRANSPORT on a loaded machine, carries no broker answer:
    then every partition is produced to again, a bounded number of times."""
    for _ in range(5):
        codes: list[int] = []
        producer = Producer({**conf, "message.timeout.ms": 8000, "enable.idempotence": False, "retries": 0})
        for p in range(partitions):
            producer.produce(
                topic,
                b"v",
                partition=p,
                on_delivery=lambda err, _m, codes=codes: codes.append(0 if err is None else err.code()),
            )
        # Past librdkafka's request.timeout.ms (30 s), so every delivery report is in.
        assert producer.flush(45) == 0, f"{len(producer)} deliveries not reported in 45 s ({codes})"
        if all(code >= 0 for code in codes):
            return sorted(codes)
    return sorted(codes)


def _write(
    name: str, pattern: ResourcePatternType, *, deny: bool = False, who: str = "User:alice"
) -> AclBinding:
    return binding(who, ResourceType.TOPIC, name, AclOperation.WRITE, deny=deny, pattern=pattern)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ZooKeeperProcess, list[BrokerProcess]]]:
    """ZooKeeper and three brokers whose only listener is SASL_PLAINTEXT (LocalCluster's readiness check
    speaks PLAINTEXT, hence the brokers are started here)."""
    require_zookeeper()
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start()
    brokers: list[BrokerProcess] = []
    try:
        for broker_id in range(3):
            settings = {**FAST, **SETTINGS, "broker.id": str(broker_id), "zookeeper.connect": zk.connect}
            brokers.append(BrokerProcess(tmp_path / f"broker-{broker_id}", settings))
            brokers[-1].start()
        yield zk, brokers
    finally:
        for proc in brokers:
            proc.stop(timeout_s=20)
        zk.stop()


def test_acl_change_on_one_broker_is_enforced_by_all(
    cluster: tuple[ZooKeeperProcess, list[BrokerProcess]],
) -> None:
    zookeeper, brokers = cluster
    clients = {b: p.listeners["CLIENT"] for b, p in enumerate(brokers)}
    every = ",".join(clients.values())
    admins = {b: AdminClient(_login(addr, "admin")) for b, addr in clients.items()}
    alice, admin = _login(every, "alice"), _login(every, "admin")
    wait_until(lambda: len(admins[0].list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")
    for f in admins[0].create_topics([NewTopic("guarded", 3, 3), NewTopic("pre.x", 3, 3)]).values():
        f.result(30)
    wait_until(lambda: _produce_codes(admin, "guarded", 3) == [0, 0, 0], what="the super user's produce")
    assert _produce_codes(alice, "guarded", 3) == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3

    grant(admins[0], _write("guarded", ResourcePatternType.LITERAL))
    grant(admins[1], _write("pre.", ResourcePatternType.PREFIXED))

    def seen_everywhere(count: int) -> None:
        for broker_id, a in admins.items():
            wait_until(
                lambda a=a: len(a.describe_acls(EVERYTHING, request_timeout=10).result()) == count,
                what=f"{count} ACLs on broker {broker_id}",
            )

    seen_everywhere(2)
    # Leaders are spread over the three brokers: each one now lets alice write its partitions.
    assert _produce_codes(alice, "guarded", 3) == [0, 0, 0]
    assert _produce_codes(alice, "pre.x", 3) == [0, 0, 0]

    grant(admins[2], _write("guarded", ResourcePatternType.LITERAL, deny=True, who="User:*"))
    seen_everywhere(3)
    assert _produce_codes(alice, "guarded", 3) == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3
    assert _produce_codes(admin, "guarded", 3) == [0, 0, 0]

    # Kafka's znodes, so Kafka's tools read the same ACLs.
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start()
    try:
        data, _ = zk.get("/kafka-acl/Topic/guarded")
        assert sorted(json.loads(data)["acls"], key=lambda a: a["principal"]) == [
            {"principal": "User:*", "permissionType": "Deny", "operation": "Write", "host": "*"},
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"},
        ]
        assert zk.exists("/kafka-acl-extended/prefixed/Topic/pre.") is not None
        assert zk.get_children("/kafka-acl-changes") and zk.get_children("/kafka-acl-extended-changes")
    finally:
        zk.stop()

    alices = acl_filter(principal="User:alice")
    removed = next(iter(admins[2].delete_acls([alices]).values())).result(15)
    assert sorted(b.name for b in removed) == ["guarded", "pre."]
    seen_everywhere(1)
    assert _produce_codes(alice, "pre.x", 3) == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3

    # A restarted broker loads the ACLs from ZooKeeper (the DENY for User:* is left).
    brokers[1].kill()  # faster than a controlled shutdown; the log recovers on start
    brokers[1].start()
    restarted = AdminClient(_login(brokers[1].listeners["CLIENT"], "admin"))
    left = wait_until(lambda: restarted.describe_acls(EVERYTHING, request_timeout=10).result(), what="ACLs")
    assert [(b.name, b.principal, b.permission_type.name) for b in left] == [("guarded", "User:*", "DENY")]
