"""ACLs on the HTTP side of a 3-broker ZooKeeper cluster over SASL_PLAINTEXT: a subject ACL set with
``strom acls --subject`` through one broker is kept as Kafka keeps ACLs (``/kafka-acl/Subject/<name>``)
and enforced by every broker's registry API; a registration sent to a broker that is not the registry
writer is forwarded with the user's Basic credentials and checked there again."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from kazoo.client import KazooClient

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import FAST, wait_until
from tests.prerequisites import require_zookeeper

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SETTINGS = {
    "listeners": "CLIENT://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "CLIENT",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.client.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin;User:broker",
}
AVRO = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "n", "type": "int"}]})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ZooKeeperProcess, list[BrokerProcess]]]:
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


def _registry(broker: BrokerProcess, user: str) -> SchemaRegistryClient:
    return SchemaRegistryClient(
        {"url": str(broker.http_url), "basic.auth.user.info": f"{user}:{user}-secret"}
    )


def _status(call: Callable[[], object]) -> int:
    try:
        call()
    except SchemaRegistryError as exc:
        return exc.http_status_code
    return 200


def test_subject_acl_is_enforced_by_every_broker(
    cluster: tuple[ZooKeeperProcess, list[BrokerProcess]],
) -> None:
    zookeeper, brokers = cluster
    admin_conf = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    admin = AdminClient({"bootstrap.servers": brokers[0].listeners["CLIENT"], **admin_conf})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")
    command_config = [arg for k, v in admin_conf.items() for arg in ("--command-config", f"{k}={v}")]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "--bootstrap-server",
            brokers[1].listeners["CLIENT"],
            *command_config,
            "acls",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--subject",
            "orders-value",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()

    # Every broker learns the ACL from ZooKeeper; alice registers through each of them (two of them
    # forward to the writer with her credentials) and gets the same id.
    ids = set()
    for broker in brokers:
        alice = _registry(broker, "alice")
        wait_until(
            lambda alice=alice: (
                _status(alice.get_subjects) == 200
                and _status(lambda: alice.register_schema("orders-value", Schema(AVRO, "AVRO"))) == 200
            ),
            60,
            f"alice's registration through {broker.http_url}",
        )
        ids.add(alice.register_schema("orders-value", Schema(AVRO, "AVRO")))
        assert alice.get_subjects() == ["orders-value"]
        assert _status(lambda alice=alice: alice.register_schema("other-value", Schema(AVRO, "AVRO"))) == 403
        bob = _registry(broker, "bob")
        assert _status(lambda bob=bob: bob.get_latest_version("orders-value")) == 403
        assert bob.get_subjects() == []
    assert len(ids) == 1

    zk = KazooClient(hosts=zookeeper.connect)
    zk.start()
    try:
        data, _ = zk.get("/kafka-acl/Subject/orders-value")
        assert sorted(a["operation"] for a in json.loads(data)["acls"]) == ["Read", "Write"]
    finally:
        zk.stop()
        zk.close()
