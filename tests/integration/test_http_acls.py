"""ACLs on the broker's HTTP side (``authorizer.class.name`` set): registry subjects as resources of
their own (set with ``strom acls --subject``), topic READ for the console's message browser and DESCRIBE
for its pages, CLUSTER DESCRIBE for ``/metrics``; 403 for a known user without rights. Judged by
confluent-kafka's SchemaRegistryClient with ``basic.auth.user.info`` and plain urllib requests."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from strom.testing.broker_process import BrokerProcess

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_prom="prom-secret";'
)
AVRO = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "n", "type": "int"}]})
ALICE, BOB, ADMIN, PROM = "alice:alice-secret", "bob:bob-secret", "admin:admin-secret", "prom:prom-secret"


def _strom(broker: BrokerProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Brokers and the test's admin calls on a PLAINTEXT listener (User:ANONYMOUS, a super user);
    users log in to the HTTP side with the SASL listener's PLAIN users."""
    overrides = {
        "listeners": "INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.client.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "http.listeners": "http://127.0.0.1:0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("http-acls") / "data", overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("orders", "secret")]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for topic in ("orders", "secret"):
            producer.produce(topic, f"a record of {topic}".encode())
        assert producer.flush(30) == 0
        allow = ("acls", "add", "--allow-principal")
        _strom(broker, *allow, "User:alice", "--operation", "Read", "--topic", "orders")
        _strom(
            broker,
            *allow,
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--subject",
            "orders-value",
        )
        _strom(broker, *allow, "User:prom", "--operation", "Describe", "--cluster")
        yield broker


def _registry(broker: BrokerProcess, user_info: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": str(broker.http_url), "basic.auth.user.info": user_info})


def _get(url: str, user_info: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + base64.b64encode(user_info.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_subject_acls_are_listed_by_strom_acls(acl_broker: BrokerProcess) -> None:
    listed = _strom(acl_broker, "acls", "list", "--subject", "orders-value")
    assert "ResourcePattern(resourceType=Subject, name=orders-value, patternType=LITERAL)" in listed
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed
    everything = _strom(acl_broker, "acls", "list")  # Kafka's types and subjects together
    assert "resourceType=TOPIC, name=orders" in everything and "resourceType=Subject" in everything


def test_registry_calls_are_checked_per_subject(acl_broker: BrokerProcess) -> None:
    secret_id = _registry(acl_broker, ADMIN).register_schema("secret-value", Schema(AVRO, "AVRO"))
    alice = _registry(acl_broker, ALICE)
    schema_id = alice.register_schema("orders-value", Schema(AVRO, "AVRO"))
    assert alice.get_latest_version("orders-value").schema_id == schema_id
    assert alice.get_subjects() == ["orders-value"]  # secret-value is not hers to see
    assert alice.get_schema(schema_id).schema_str is not None  # by id: READ on a subject holding it
    with pytest.raises(SchemaRegistryError) as refused:
        alice.register_schema("secret-value", Schema(AVRO, "AVRO"))
    assert refused.value.http_status_code == 403 and refused.value.error_code == 40301
    assert "denied operation Write on Subject: secret-value" in refused.value.error_message
    bob = _registry(acl_broker, BOB)
    assert bob.get_subjects() == []
    for call in (lambda: bob.get_latest_version("orders-value"), lambda: bob.get_schema(secret_id)):
        with pytest.raises(SchemaRegistryError) as refused:
            call()
        assert refused.value.http_status_code == 403
    with pytest.raises(SchemaRegistryError) as refused:
        bob.set_compatibility(level="NONE")  # PUT /config: ALTER_CONFIGS on the cluster
    assert refused.value.http_status_code == 403


def test_console_and_metrics_are_checked(acl_broker: BrokerProcess) -> None:
    url = acl_broker.http_url
    status, body = _get(f"{url}/ui/topics/orders/0", ALICE)
    assert status == 200 and b"a record of orders" in body
    assert _get(f"{url}/ui/topics/secret/0", ALICE)[0] == 403
    assert _get(f"{url}/ui/topics/secret", ALICE)[0] == 403
    assert _get(f"{url}/ui/topics/orders/0", BOB)[0] == 403
    status, body = _get(f"{url}/ui/topics", ALICE)
    assert status == 200 and b"/ui/topics/orders" in body and b"/ui/topics/secret" not in body
    assert _get(f"{url}/metrics", ALICE)[0] == 403
    status, body = _get(f"{url}/metrics", PROM)
    assert status == 200 and b"kafka_server" in body
    assert _get(f"{url}/metrics", ADMIN)[0] == 200


def test_unknown_user_gets_401_not_403(acl_broker: BrokerProcess) -> None:
    assert _get(f"{acl_broker.http_url}/subjects", "mallory:x")[0] == 401
