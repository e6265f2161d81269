"""SASL re-authentication (KIP-368) with ``connections.max.reauth.ms=4000``: clients that re-authenticate
(librdkafka 2.2+ in confluent-kafka, kafka-python 3) keep their connections for three lifetimes with
PLAIN and SCRAM, counted in the broker's log; aiokafka, which does not, has its connection closed once
its session has ended and reconnects; and the wire rules (session lifetime, same mechanism, same
principal, what an ended session may still send) checked with a raw client."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strom.protocol.api import ApiKey
from strom.testing.broker_process import BrokerProcess
from strom.testing.metrics import scrape, value
from tests.integration.rawclient import RawClient
from tests.integration.secure_clients import Security, librdkafka_settings

# Clients re-authenticate a little before the session ends; at 2 s a loaded machine made librdkafka late once.
SESSION_MS = 4000
RUN_S = 3 * SESSION_MS / 1000
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_erin="erin-secret" user_bob="bob-secret";'
)


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(SESSION_MS),
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("reauth") / "data", overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        upserts = [
            UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw")
            for user in ("carol", "dave")
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)
        yield broker


def _security(mechanism: str, user: str, password: str) -> Security:
    return Security("SASL_PLAINTEXT", mechanism=mechanism, username=user, password=password)


def _confluent(bootstrap: str, sec: Security) -> int:
    """Produce one record every 100 ms for RUN_S while a consumer reads them; the count read."""
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    base = {"bootstrap.servers": bootstrap, **librdkafka_settings(sec)}
    producer = Producer(base)
    consumer = Consumer({**base, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    sent, got = 0, 0
    deadline = time.monotonic() + RUN_S
    try:
        while time.monotonic() < deadline or got < sent:
            if time.monotonic() < deadline:
                producer.produce(topic, f"{sent}".encode())
                sent += 1
                producer.poll(0)
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                got += 1
            if time.monotonic() > deadline + 20:
                break
        assert producer.flush(10) == 0
    finally:
        consumer.close()
    assert got == sent, f"confluent-kafka read {got} of {sent}"
    return got


def _kafka_python(bootstrap: str, sec: Security) -> int:
    from kafka import KafkaConsumer, KafkaProducer

    settings = {
        "security_protocol": sec.protocol,
        "sasl_mechanism": sec.mechanism,
        "sasl_plain_username": sec.username,
        "sasl_plain_password": sec.password,
    }
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **settings)
    consumer.subscribe([topic])
    sent, got = 0, 0
    deadline = time.monotonic() + RUN_S
    try:
        while time.monotonic() < deadline or got < sent:
            if time.monotonic() < deadline:
                producer.send(topic, f"{sent}".encode()).get(timeout=10)
                sent += 1
            got += sum(len(batch) for batch in consumer.poll(timeout_ms=100).values())
            if time.monotonic() > deadline + 20:
                break
    finally:
        producer.close()
        consumer.close()
    assert got == sent, f"kafka-python read {got} of {sent}"
    return got


def _aiokafka(bootstrap: str, sec: Security) -> int:
    from aiokafka import AIOKafkaProducer

    async def run() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            security_protocol=sec.protocol,
            sasl_mechanism=sec.mechanism,
            sasl_plain_username=sec.username,
            sasl_plain_password=sec.password,
        )
        await producer.start()
        topic, sent = f"reauth-{uuid.uuid4().hex[:8]}", 0
        try:
            deadline = time.monotonic() + RUN_S
            while time.monotonic() < deadline:
                await producer.send_and_wait(topic, f"{sent}".encode())
                sent += 1
                await asyncio.sleep(0.2)
        finally:
            await producer.stop()
        return sent

    return asyncio.run(run())


def _lines(broker: BrokerProcess, *needles: str) -> list[str]:
    return [line for line in broker.log_path.read_text().splitlines() if all(n in line for n in needles)]


def test_clients_keep_or_regain_their_connections_across_session_ends(reauth_broker: BrokerProcess) -> None:
    bootstrap = reauth_broker.listeners["SASL_PLAINTEXT"]
    runs: dict[str, tuple[Callable[[str, Security], int], Security]] = {
        "alice": (_confluent, _security("PLAIN", "alice", "alice-secret")),
        "carol": (_confluent, _security("SCRAM-SHA-512", "carol", "pw")),
        "dave": (_kafka_python, _security("SCRAM-SHA-512", "dave", "pw")),
        "erin": (_aiokafka, _security("PLAIN", "erin", "erin-secret")),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {user: pool.submit(run, bootstrap, sec) for user, (run, sec) in runs.items()}
        counts = {user: future.result(timeout=120) for user, future in futures.items()}
    assert all(n >= 10 for n in counts.values()), counts
    for user in ("alice", "carol", "dave"):
        again = _lines(reauth_broker, "re-authentication from", f"as User:{user}")
        assert len(again) >= 2, f"{user}: {len(again)} re-authentications in {RUN_S} s"
        assert not _lines(reauth_broker, f"SASL session of User:{user} has expired")
    # aiokafka does not re-authenticate: the broker closes its connection at the first request after
    # the session, and it logs in again on a new one; every record was still acknowledged.
    assert _lines(reauth_broker, "SASL session of User:erin has expired")
    assert len(_lines(reauth_broker, "SASL PLAIN connection from", "as User:erin")) >= 2
    # The same counts on /metrics, named as Kafka's socket-server-metrics (a SASL broker's HTTP side
    # authenticates: HTTP Basic with a PLAIN user).
    assert reauth_broker.http_url is not None
    samples = scrape(reauth_broker.http_url, auth=("alice", "alice-secret"))
    labels = {"listener": "SASL_PLAINTEXT", "networkprocessor": "0"}
    prefix = "kafka_server_socket_server_metrics_"
    again = sum(
        len(_lines(reauth_broker, "re-authentication from", f"as User:{u}"))
        for u in ("alice", "carol", "dave")
    )
    assert value(samples, f"{prefix}successful_reauthentication_total", **labels) >= again
    assert value(samples, f"{prefix}expired_connections_killed_count", **labels) >= 1
    assert value(samples, f"{prefix}successful_authentication_total", **labels) >= 4


def _login(raw: RawClient, mechanism: str, token: bytes, version: int = 1) -> dict[str, Any]:
    assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    return dict(raw.call(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}))


def test_wire_rules_of_re_authentication(reauth_broker: BrokerProcess) -> None:
    bootstrap = reauth_broker.listeners["SASL_PLAINTEXT"]
    alice, bob = b"\0alice\0alice-secret", b"\0bob\0bob-secret"
    metadata = (ApiKey.METADATA, 1, {"topics": None})
    with (
        RawClient(bootstrap) as late,
        RawClient(bootstrap) as idle,
        RawClient(bootstrap) as v0,
        RawClient(bootstrap) as other,
        RawClient(bootstrap) as switch,
    ):
        answer = _login(late, "PLAIN", alice, version=2)
        assert (answer["error_code"], answer["session_lifetime_ms"]) == (0, SESSION_MS)
        _login(idle, "PLAIN", alice)
        _login(v0, "PLAIN", alice, version=0)  # cannot be told the lifetime, nor re-authenticate
        _login(other, "PLAIN", alice)
        _login(switch, "PLAIN", alice)
        # Within the session: re-authenticating as someone else, or with another mechanism, closes.
        assert _login(other, "PLAIN", bob)["error_code"] == 58
        assert other.closed_by_peer()
        assert switch.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 33
        assert switch.closed_by_peer()
        assert late.call(*metadata)["brokers"]
        time.sleep(SESSION_MS / 1000 + 0.3)
        # After the session: re-authentication is still accepted, and starts a new session ...
        answer = _login(late, "PLAIN", alice)
        assert (answer["error_code"], answer["session_lifetime_ms"]) == (0, SESSION_MS)
        assert late.call(*metadata)["brokers"]
        # ... anything else closes the connection without a reply, also on a v0 client's connection.
        idle.send(*metadata)
        assert idle.closed_by_peer()
        v0.send(*metadata)
        assert v0.closed_by_peer()
