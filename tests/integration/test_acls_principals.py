"""ACLs between named principals: ``User:admin`` (a super user) and ``User:alice``, told apart by SASL
PLAIN logins or by their client certificates on a mutual-TLS listener (``ssl.principal.mapping.rules``
maps ``CN=alice,...`` to ``alice``), with ``allow.everyone.if.no.acl.found=false``: alice is refused
with Kafka's error codes until the admin grants her ACLs, and DENY and PREFIXED rules then apply as in
Kafka."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from strom.testing.broker_process import BrokerProcess
from tests.integration.acl_clients import binding, consume_code, grant, kafka_python_filter, produce_code
from tests.integration.certs import Pki, make_pki, name
from tests.integration.secure_clients import Security, _python_settings, librdkafka_settings

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki-acls"))


@pytest.fixture
def broker(pki: Pki, tmp_path: Path) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.mtls.ssl.keystore.location": str(pki.broker),
        "listener.name.mtls.ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(tmp_path / "b", overrides) as b:
        yield b


def _conf(broker: BrokerProcess, pki: Pki, who: str, login: str) -> dict[str, Any]:
    if login == "sasl-plain":
        sec = Security("SASL_PLAINTEXT", mechanism="PLAIN", username=who, password=f"{who}-secret")
        return {"bootstrap.servers": broker.listeners["SASL_PLAINTEXT"], **librdkafka_settings(sec)}
    cert, key = pki.client(name(who), who)
    return {
        "bootstrap.servers": broker.listeners["MTLS"],
        **librdkafka_settings(Security("SSL", pki.ca, cert, key)),
    }


def _producer_id_error(conf: dict[str, Any]) -> int:
    """The fatal error an idempotent producer raises when it gets no producer id (0 if none in 10 s)."""
    producer = Producer({**conf, "enable.idempotence": True})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            producer.poll(0.2)
        except KafkaException as exc:
            return int(exc.args[0].code())
    return 0


_alice = partial(binding, "User:alice")  # (rtype, name, op, *, deny=False, pattern=LITERAL)


@pytest.mark.parametrize("login", ["sasl-plain", "mtls"])
def test_alice_is_refused_until_admin_grants(broker: BrokerProcess, pki: Pki, login: str) -> None:
    admin_conf, alice_conf = _conf(broker, pki, "admin", login), _conf(broker, pki, "alice", login)
    admin = AdminClient(admin_conf)
    for f in admin.create_topics([NewTopic("orders", 1, 1), NewTopic("ordinary", 1, 1)]).values():
        f.result(15)
    assert produce_code(admin_conf, "orders") == 0  # the super user needs no ACL

    assert produce_code(alice_conf, "orders") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # KIP-679: an idempotent producer with neither IDEMPOTENT_WRITE nor WRITE on any topic gets no
    # producer id (a fatal error in librdkafka).
    assert _producer_id_error(alice_conf) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert consume_code(alice_conf, "g", "orders") == KafkaError.GROUP_AUTHORIZATION_FAILED
    alice_admin = AdminClient(alice_conf)
    assert "orders" not in alice_admin.list_topics(timeout=15).topics
    with pytest.raises(KafkaException) as info:
        alice_admin.create_topics([NewTopic("mine", 1, 1)])["mine"].result(15)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as info:
        grant(alice_admin, _alice(ResourceType.TOPIC, "orders", AclOperation.ALL))
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    grant(
        admin,
        _alice(ResourceType.TOPIC, "ord", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        _alice(ResourceType.TOPIC, "orders", AclOperation.READ),
        _alice(ResourceType.GROUP, "g", AclOperation.READ),
    )
    assert produce_code(alice_conf, "orders") == 0
    assert produce_code(alice_conf, "ordinary") == 0  # the PREFIXED grant
    assert produce_code(alice_conf, "orders", idempotent=True) == 0  # WRITE on some topic suffices
    assert consume_code(alice_conf, "g", "orders") == 0
    assert "orders" in alice_admin.list_topics(timeout=15).topics  # WRITE implies DESCRIBE
    described = alice_admin.describe_topics(
        TopicCollection(["orders"]), request_timeout=15, include_authorized_operations=True
    )["orders"].result()
    assert {op.name for op in described.authorized_operations} == {"READ", "WRITE", "DESCRIBE"}

    # DENY beats ALLOW: a DENY for everybody on the prefix refuses alice, not the super user.
    everybody = binding(
        "User:*",
        ResourceType.TOPIC,
        "ordi",
        AclOperation.WRITE,
        deny=True,
        pattern=ResourcePatternType.PREFIXED,
    )
    grant(admin, everybody)
    assert produce_code(alice_conf, "ordinary") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_code(alice_conf, "orders") == 0
    assert produce_code(admin_conf, "ordinary") == 0


def test_kafka_python_sees_the_same_codes(broker: BrokerProcess, pki: Pki) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    cert, key = pki.client(name("alice"), "alice-kp")
    settings = _python_settings(Security("SSL", pki.ca, cert, key), aio=False)
    bootstrap = broker.listeners["MTLS"]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **settings)
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10_000, **settings)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(kafka_python_filter())
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("orders", b"v").get(timeout=15)
    finally:
        producer.close()
        admin.close()
