"""Client quotas on a real broker over TCP: set and described with ``strom quotas`` (kafka-python's
DescribeClientQuotas/AlterClientQuotas messages), then a confluent-kafka producer and consumer held to
within 10% of their byte rates by throttling, with the throttle time in their responses (librdkafka's
statistics) and in ``/metrics``.

The broker measures rates over 2 windows of 1 s (``quota.window.num``, ``quota.window.size.seconds``):
with Kafka's 11 windows a rate converges only over multiples of 11 s (a client bursts whenever the
oldest window leaves the span), and the test would take minutes on a loaded machine."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing import BrokerProcess
from strom.testing.metrics import scrape, value
from tests.integration.quota_clients import consume_flat_out, produce_flat_out, strom_quotas
from tests.integration.rawclient import RawClient
from tests.integration.secure_clients import Security, librdkafka_settings

STROM = [sys.executable, "-m", "strom.cli.main"]
RATE = 256_000  # bytes per second
WARM_UP_S, MEASURE_S = 2.0, 20.0


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("quotas") / "data",
        {"quota.window.num": "2", "quota.window.size.seconds": "1", "group.initial.rebalance.delay.ms": "0"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _topic(bootstrap: str) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic is made
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def _ok(bootstrap: str, *args: str) -> str:
    done = strom_quotas(bootstrap, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quotas_are_set_described_and_removed_as_kafka_configs_does(quota_broker: BrokerProcess) -> None:
    b = quota_broker.bootstrap
    user = ("--entity-type", "users", "--entity-name", "alice")
    validated = _ok(b, "alter", *user, "--add-config", "producer_byte_rate=1024", "--validate-only")
    assert validated == "Validated config for user-principal 'alice'.\n"
    assert "alice" not in _ok(b, "describe")
    assert _ok(b, "alter", *user, "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048") == (
        "Completed updating config for user-principal 'alice'.\n"
    )
    _ok(
        b,
        "alter",
        *user,
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "request_percentage=50",
    )
    _ok(
        b,
        "alter",
        "--entity-type",
        "users",
        "--entity-default",
        "--add-config",
        "controller_mutation_rate=2.5",
    )
    _ok(
        b,
        "alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--add-config",
        "consumer_byte_rate=4096",
    )
    assert _ok(b, "describe", "--entity-type", "users").splitlines() == [
        "Quota configs for the default user-principal are controller_mutation_rate=2.5",
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0",
        "Quota configs for user-principal 'alice', the default client-id are request_percentage=50.0",
    ]
    assert _ok(b, "describe", "--entity-type", "users", "--entity-default").splitlines() == [
        "Quota configs for the default user-principal are controller_mutation_rate=2.5"
    ]
    assert _ok(b, "describe", "--entity-type", "clients", "--entity-name", "app").splitlines() == [
        "Quota configs for client-id 'app' are consumer_byte_rate=4096.0"
    ]
    unknown = strom_quotas(b, "alter", *user, "--add-config", "producer_rate=5")
    assert unknown.returncode == 1 and "unknown quota key 'producer_rate'" in unknown.stderr
    fractional = strom_quotas(b, "alter", *user, "--add-config", "producer_byte_rate=1.5")
    assert fractional.returncode == 1 and "whole number" in fractional.stderr
    _ok(b, "alter", *user, "--delete-config", "producer_byte_rate,consumer_byte_rate")
    _ok(
        b,
        "alter",
        *user,
        "--entity-type",
        "clients",
        "--entity-default",
        "--delete-config",
        "request_percentage",
    )
    _ok(
        b,
        "alter",
        "--entity-type",
        "users",
        "--entity-default",
        "--delete-config",
        "controller_mutation_rate",
    )
    _ok(
        b,
        "alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--delete-config",
        "consumer_byte_rate",
    )
    assert _ok(b, "describe") == ""


@pytest.mark.parametrize("version", [0, 1])
def test_both_versions_over_the_wire(quota_broker: BrokerProcess, version: int) -> None:
    """v0 (kafka-python negotiates v1, the flexible one): alter, describe with a filter, remove."""
    entity = [{"entity_type": "client-id", "entity_name": f"raw-v{version}"}]
    with RawClient(quota_broker.bootstrap) as raw:
        ops = [{"key": "consumer_byte_rate", "value": 5000.0, "remove": False}]
        altered = raw.call(
            ApiKey.ALTER_CLIENT_QUOTAS,
            version,
            {"entries": [{"entity": entity, "ops": ops}], "validate_only": False},
        )
        assert [e["error_code"] for e in altered["entries"]] == [0]
        component = {"entity_type": "client-id", "match_type": 0, "match": f"raw-v{version}"}
        described = raw.call(
            ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {"components": [component], "strict": True}
        )
        assert described["error_code"] == 0
        assert described["entries"] == [
            {"entity": entity, "values": [{"key": "consumer_byte_rate", "value": 5000.0}]}
        ]
        ops = [{"key": "consumer_byte_rate", "value": 0.0, "remove": True}]
        raw.call(
            ApiKey.ALTER_CLIENT_QUOTAS,
            version,
            {"entries": [{"entity": entity, "ops": ops}], "validate_only": False},
        )
        described = raw.call(
            ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {"components": [component], "strict": True}
        )
        assert described["entries"] == []


def test_a_producer_is_held_to_its_byte_rate(quota_broker: BrokerProcess) -> None:
    b = quota_broker.bootstrap
    topic = _topic(b)
    _ok(
        b,
        "alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "quota-producer",
        "--add-config",
        f"producer_byte_rate={RATE}",
    )
    seen: dict[str, Any] = {}
    assert quota_broker.http_url is not None
    url = quota_broker.http_url
    try:
        run = produce_flat_out(
            b, topic, "quota-producer", WARM_UP_S + MEASURE_S, probe=lambda: seen.update(scrape(url))
        )
    finally:
        _ok(
            b,
            "alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "quota-producer",
            "--delete-config",
            "producer_byte_rate",
        )
    measured = run.rate(WARM_UP_S, WARM_UP_S + MEASURE_S)
    assert measured == pytest.approx(RATE, rel=0.10), f"{measured:.0f} B/s against a quota of {RATE}"
    assert run.throttle_ms.get(0, 0) > 0  # the responses said so
    # Mid-run, /metrics showed the client's sensor, throttled (its rate swings with the 2 windows).
    assert value(seen, "kafka_server_produce_throttle_time", user="", client_id="quota-producer") > 0
    assert value(seen, "kafka_server_produce_byte_rate", user="", client_id="quota-producer") > 0


def test_a_consumer_is_held_to_its_byte_rate(quota_broker: BrokerProcess) -> None:
    b = quota_broker.bootstrap
    topic = _topic(b)
    # Batches of 16 kB: a fetch returns whole batches, so they bound each response's size.
    producer = Producer({"bootstrap.servers": b, "linger.ms": 20, "batch.size": 16384})
    for _ in range(int(RATE * (WARM_UP_S + MEASURE_S + 8) / 1000)):
        producer.produce(topic, b"y" * 1000)
        producer.poll(0)
    assert producer.flush(60) == 0
    _ok(
        b,
        "alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "quota-consumer",
        "--add-config",
        f"consumer_byte_rate={RATE}",
    )
    seen: dict[str, Any] = {}
    assert quota_broker.http_url is not None
    url = quota_broker.http_url
    try:
        run = consume_flat_out(
            b,
            topic,
            "quota-consumer",
            WARM_UP_S + MEASURE_S,
            probe=lambda: seen.update(scrape(url)),
            **{"fetch.max.bytes": 65536, "max.partition.fetch.bytes": 65536, "message.max.bytes": 65536},
        )
    finally:
        _ok(
            b,
            "alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "quota-consumer",
            "--delete-config",
            "consumer_byte_rate",
        )
    measured = run.rate(WARM_UP_S, WARM_UP_S + MEASURE_S)
    assert measured == pytest.approx(RATE, rel=0.10), f"{measured:.0f} B/s against a quota of {RATE}"
    assert run.throttle_ms.get(0, 0) > 0
    assert value(seen, "kafka_server_fetch_throttle_time", user="", client_id="quota-consumer") > 0


def test_a_user_quota_follows_the_sasl_principal(tmp_path: Path) -> None:
    """Precedence by principal: alice's own quota throttles her over SASL; the default user's quota
    applies to ANONYMOUS on the plaintext listener (same client id) and to bob, whose own entity sets
    only consumer_byte_rate (each key resolves on its own); once the default goes, bob is free."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    }
    with BrokerProcess(tmp_path / "b", overrides) as broker:
        plain, sasl = broker.bootstrap, broker.listeners["SASL_PLAINTEXT"]
        for user in ("alice", "bob"):
            created = subprocess.run(
                [
                    *STROM,
                    "--bootstrap-server",
                    plain,
                    "users",
                    "create",
                    user,
                    "--mechanism",
                    "SCRAM-SHA-256",
                ],
                input=f"{user}-secret\n",
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert created.returncode == 0, created.stderr
        _ok(
            plain,
            "alter",
            "--entity-type",
            "users",
            "--entity-name",
            "alice",
            "--add-config",
            "producer_byte_rate=20000",
        )
        _ok(
            plain,
            "alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "consumer_byte_rate=1000",
        )
        _ok(
            plain,
            "alter",
            "--entity-type",
            "users",
            "--entity-default",
            "--add-config",
            "producer_byte_rate=30000",
        )
        topic = _topic(plain)

        def login(user: str) -> dict[str, str]:
            sec = Security(
                "SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", username=user, password=f"{user}-secret"
            )
            return librdkafka_settings(sec)

        alice = produce_flat_out(sasl, topic, "app", 5.0, **login("alice"))
        anonymous = produce_flat_out(plain, topic, "app", 5.0)
        assert alice.throttle_ms.get(0, 0) > 0 and anonymous.throttle_ms.get(0, 0) > 0
        # bob has a quota of his own, but not for producing: the default user's 30 kB/s applies to him.
        bob = produce_flat_out(sasl, topic, "app", 5.0, **login("bob"))
        assert bob.throttle_ms.get(0, 0) > 0
        _ok(
            plain,
            "alter",
            "--entity-type",
            "users",
            "--entity-default",
            "--delete-config",
            "producer_byte_rate",
        )
        free = produce_flat_out(sasl, topic, "app", 3.0, **login("bob"))
        assert not free.throttle_ms.get(0, 0), free.throttle_ms
        assert free.rate(0.0, 3.0) > 100_000
