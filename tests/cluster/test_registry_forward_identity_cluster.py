"""A certificate-only user's registry write through a broker that is not the registry writer, on a
3-broker ZooKeeper cluster with SASL_SSL listeners, ACLs and ``https://`` HTTP listeners asking for client
certificates: the forward logs in as the broker and names the user, so the writer authorizes that user.

carol (a client certificate, no password) may write subject ``orders-value`` and registers through both
followers; dave (a certificate, no rights) gets 403 there. At the writer itself nobody but a broker may
name a principal (carol naming ``User:admin`` gets 403), and a broker naming dave is authorized as dave,
not as the super user it logged in as.

The same cluster answers the issue's "done when": without a login the registry, the console and
``/metrics`` answer 401; a user without rights gets 403 (or an empty list); alice, with rights, uses
confluent-kafka's SchemaRegistryClient with ``basic.auth.user.info`` and the console shows her only the
topic she may describe."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import wait_until
from tests.cluster.secure_cluster import sasl_ssl_brokers
from tests.integration.certs import Pki, make_pki, name
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)
SETTINGS = {
    "listeners": "SASL_SSL://127.0.0.1:0",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin;User:broker",
    "http.listeners": "https://127.0.0.1:0",
    "listener.name.http.ssl.client.auth": "requested",
}
CAROL = "User:CN=carol,O=Strom Test,C=US"
DAVE = "User:CN=dave,O=Strom Test,C=US"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
PAYMENT = Schema(
    json.dumps({"type": "record", "name": "Payment", "fields": [{"name": "n", "type": "int"}]}), "AVRO"
)
DENIED = Schema(json.dumps({"type": "record", "name": "D", "fields": [{"name": "n", "type": "int"}]}), "AVRO")


def _schema(record: str) -> str:
    return json.dumps({"type": "record", "name": record, "fields": [{"name": "n", "type": "int"}]})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[BrokerProcess], Pki]]:
    require_zookeeper()
    tmp_path = tmp_path_factory.mktemp("forward-identity")
    pki = make_pki(tmp_path / "pki")
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start()
    try:
        with sasl_ssl_brokers(zk, tmp_path, pki, SETTINGS) as brokers:
            yield brokers, pki
    finally:
        zk.stop()


def _admin_config(pki: Pki, user: str = "admin") -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def _strom_acls(brokers: list[BrokerProcess], pki: Pki, *args: str) -> None:
    command_config = [arg for k, v in _admin_config(pki).items() for arg in ("--command-config", f"{k}={v}")]
    done = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "--bootstrap-server", brokers[1].bootstrap,
         *command_config, "acls", "add", *args],
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()


def _get(url: str, context: ssl.SSLContext, user: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{user}-secret".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _status(call: Callable[[], object]) -> int:
    try:
        call()
    except SchemaRegistryError as exc:
        return exc.http_status_code
    return 200


def _post(
    url: str, context: ssl.SSLContext, headers: dict[str, str], body: object
) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": CONTENT_TYPE, **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_a_certificate_users_forwarded_write_is_authorized_as_that_user(
    cluster: tuple[list[BrokerProcess], Pki],
) -> None:
    brokers, pki = cluster
    admin_conf = _admin_config(pki)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap, **admin_conf})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")
    _strom_acls(
        brokers, pki, "--allow-principal", CAROL, "--operation", "Write", "--operation", "Read",
        "--subject", "orders-value",
    )  # fmt: skip

    # admin's first registration creates _schemas; its leader is the writer.
    admin_registry = SchemaRegistryClient(
        {"url": str(brokers[0].http_url), "ssl.ca.location": str(pki.ca),
         "basic.auth.user.info": "admin:admin-secret"}
    )  # fmt: skip
    wait_until(
        lambda: (
            _status(lambda: admin_registry.register_schema("first-value", Schema(_schema("F"), "AVRO")))
            == 200
        ),
        60,
        "the first registration",
    )
    writer = int(admin.list_topics("_schemas", timeout=10).topics["_schemas"].partitions[0].leader)
    followers = [b for i, b in enumerate(brokers) if i != writer]

    carol_cert, carol_key = pki.client(name("carol"), "carol")
    dave_cert, dave_key = pki.client(name("dave"), "dave")

    def registry(broker: BrokerProcess, cert: Path, key: Path) -> SchemaRegistryClient:
        return SchemaRegistryClient(
            {"url": str(broker.http_url), "ssl.ca.location": str(pki.ca),
             "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
        )  # fmt: skip

    ids = set()
    for broker in followers:
        carol = registry(broker, carol_cert, carol_key)
        wait_until(
            lambda carol=carol: (
                _status(lambda: carol.register_schema("orders-value", Schema(_schema("Order"), "AVRO")))
                == 200
            ),
            60,
            f"carol's registration through follower {broker.http_url}",
        )
        ids.add(carol.register_schema("orders-value", Schema(_schema("Order"), "AVRO")))
        assert carol.get_subjects() == ["orders-value"]
        dave = registry(broker, dave_cert, dave_key)
        assert _status(lambda dave=dave: dave.register_schema("orders-value", DENIED)) == 403
    assert len(ids) == 1

    # Only a broker's login may name a principal, at the writer too.
    url = f"{brokers[writer].http_url}/subjects/orders-value/versions"
    order_v2 = {"type": "record", "name": "Order", "fields": [{"name": "n", "type": "int"},
                {"name": "m", "type": "int", "default": 0}]}  # fmt: skip
    body = {"schema": json.dumps(order_v2)}  # compatible with carol's first version
    as_carol = ssl.create_default_context(cafile=str(pki.ca))
    as_carol.load_cert_chain(str(carol_cert), str(carol_key))
    status, answer = _post(url, as_carol, {"X-Strom-Principal": "User:admin", "X-Strom-Forwarded": "1"}, body)
    assert status == 403, answer
    assert answer["message"] == "X-Strom-Principal is accepted from brokers only"
    broker_login = "Basic " + base64.b64encode(b"broker:broker-secret").decode()
    plain_tls = ssl.create_default_context(cafile=str(pki.ca))
    named = {"Authorization": broker_login, "X-Strom-Principal": DAVE, "X-Strom-Forwarded": "1"}
    status, answer = _post(url, plain_tls, named, body)
    assert (status, answer["error_code"]) == (403, 40301), answer
    status, answer = _post(url, plain_tls, {**named, "X-Strom-Principal": CAROL}, body)
    assert status == 200 and isinstance(answer["id"], int), answer


def test_the_http_side_answers_only_those_with_rights(cluster: tuple[list[BrokerProcess], Pki]) -> None:
    brokers, pki = cluster
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap, **_admin_config(pki)})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")
    for topic in ("payments", "payroll"):
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    binding = AclBinding(ResourceType.TOPIC, "payments", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    for future in admin.create_acls([binding]).values():
        future.result(30)
    _strom_acls(
        brokers, pki, "--allow-principal", "User:alice", "--operation", "Write", "--subject", "payments-value"
    )

    tls = ssl.create_default_context(cafile=str(pki.ca))
    as_dave = ssl.create_default_context(cafile=str(pki.ca))
    as_dave.load_cert_chain(*(str(p) for p in pki.client(name("dave"), "dave-http")))
    for broker in brokers:
        url = str(broker.http_url)
        for path in ("/subjects", "/ui/", "/ui/topics/payments", "/metrics"):
            assert _get(url + path, tls)[0] == 401, path
        # A known user without rights: 403 (and lists cut down to nothing).
        wait_until(lambda url=url: _get(url + "/ui/topics/payments", tls, "alice")[0] == 200, 60, "ACLs")
        for path in ("/ui/topics/payments", "/metrics", "/ui/acls", "/subjects/payments-value/versions"):
            assert _get(url + path, as_dave)[0] == 403, path
        assert _get(url + "/subjects", as_dave) == (200, "[]")
        # alice: the registry through confluent-kafka's client with basic.auth.user.info, and the
        # console shows her the one topic she may describe.
        alice = SchemaRegistryClient(
            {"url": url, "ssl.ca.location": str(pki.ca), "basic.auth.user.info": "alice:alice-secret"}
        )
        wait_until(
            lambda alice=alice: _status(lambda: alice.register_schema("payments-value", PAYMENT)) == 200,
            60,
            f"alice's registration through {url}",
        )
        assert alice.get_subjects() == ["payments-value"]
        status, page = _get(url + "/ui/topics", tls, "alice")
        assert status == 200 and "/ui/topics/payments" in page and "payroll" not in page
        assert _get(url + "/ui/topics/payroll", tls, "alice")[0] == 403
        assert _get(url + "/metrics", tls, "alice")[0] == 403
        assert _get(url + "/metrics", tls, "admin")[0] == 200
