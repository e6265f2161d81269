"""SSL listeners (KIP-651 PEM) with every real client; mutual TLS principals; bad TLS refused while the
broker keeps serving."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess
from tests.integration.certs import Pki, make_pki, name
from tests.integration.secure_clients import CLIENTS, Security, kcat_args, librdkafka_settings, roundtrip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def ssl_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """PLAINTEXT for brokers, SSL (combined PEM keystore) and MTLS (inline PEM, client auth required)."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.location": str(pki.broker),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.keystore.key": pki.broker_key.read_text(),
        "listener.name.mtls.ssl.keystore.certificate.chain": pki.broker_cert.read_text(),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),O=Mapped.*$/$1/L,DEFAULT",
        "group.initial.rebalance.delay.ms": "0",
        "http.listeners": "https://127.0.0.1:0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("ssl") / "data", overrides) as broker:
        yield broker


@pytest.mark.parametrize("client", CLIENTS)
def test_ssl_roundtrip(ssl_broker: BrokerProcess, pki: Pki, client: str) -> None:
    roundtrip(client, ssl_broker.listeners["SSL"], Security("SSL", ca=pki.ca), value_size=10_000)
    # Clients closing TLS connections is routine: no asyncio warning about eof_received per close.
    assert "eof_received" not in ssl_broker.log_path.read_text()


def test_large_fetch_responses_over_ssl_arrive_byte_for_byte(ssl_broker: BrokerProcess, pki: Pki) -> None:
    """Fetch responses of several MB over TLS (the broker hands them to the TLS layer piece by piece,
    reading the segment files as it goes): every byte of every value comes back, in order."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "tls-large-fetch"
    admin = AdminClient({"bootstrap.servers": ssl_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    # 24 MB in 100 KB values, each unlike any other (its index in every 8-byte word).
    values = [i.to_bytes(8, "big") * 12_800 for i in range(240)]
    producer = Producer({"bootstrap.servers": ssl_broker.bootstrap, "linger.ms": 50})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": ssl_broker.listeners["SSL"],
            **librdkafka_settings(Security("SSL", ca=pki.ca)),
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 16_000_000,  # fetch responses of up to 16 MB
            "max.partition.fetch.bytes": 16_000_000,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
    finally:
        consumer.close()
    assert len(got) == len(values)
    assert got == values


def _log_has(broker: BrokerProcess, text: str, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in broker.log_path.read_text():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_mtls_principal_is_the_certificate_subject(ssl_broker: BrokerProcess, pki: Pki, client: str) -> None:
    cert, key = pki.client(name(f"alice-{client}", org="Acme, Inc."), f"alice-{client}")
    roundtrip(client, ssl_broker.listeners["MTLS"], Security("SSL", ca=pki.ca, cert=cert, key=key))
    # RFC 2253, most specific first, the comma in O escaped (Kafka's form).
    assert _log_has(ssl_broker, f"as User:CN=alice-{client},O=Acme\\, Inc.,C=US")
    mapped_cert, mapped_key = pki.client(name("Bob", org="Mapped"), "bob")
    roundtrip(
        client, ssl_broker.listeners["MTLS"], Security("SSL", ca=pki.ca, cert=mapped_cert, key=mapped_key)
    )
    assert _log_has(ssl_broker, "as User:bob")


def test_mtls_without_certificate_is_refused(ssl_broker: BrokerProcess, pki: Pki) -> None:
    host, port = ssl_broker.listeners["MTLS"].split(":")
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError)),
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        # TLS 1.3: the refusal of a missing client certificate arrives after the handshake.
        tls.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)
        if not tls.recv(1):
            raise ConnectionError("closed")
    roundtrip("confluent-kafka", ssl_broker.listeners["SSL"], Security("SSL", ca=pki.ca))


def test_untrusted_broker_and_garbage_refused_broker_keeps_serving(
    ssl_broker: BrokerProcess, pki: Pki, tmp_path: Path
) -> None:
    other = make_pki(tmp_path / "other", tag=" other")
    # A client trusting another CA refuses the broker's certificate.
    failed = subprocess.run(
        [*kcat_args(ssl_broker.listeners["SSL"], Security("SSL", ca=other.ca)), "-L", "-m", "5"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode != 0
    # An expired client certificate is refused on the mTLS listener.
    old_cert, old_key = pki.client(name("expired"), "expired", expired=True)
    failed = subprocess.run(
        [
            *kcat_args(ssl_broker.listeners["MTLS"], Security("SSL", ca=pki.ca, cert=old_cert, key=old_key)),
            "-L",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode != 0
    # A client certificate from an untrusted CA is refused on the mTLS listener.
    cert, key = other.client(name("mallory"), "mallory")
    failed = subprocess.run(
        [
            *kcat_args(ssl_broker.listeners["MTLS"], Security("SSL", ca=pki.ca, cert=cert, key=key)),
            "-L",
            "-m",
            "5",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode != 0
    # Garbage instead of a ClientHello, and a plaintext Kafka request on the TLS port.
    for junk in (b"\xff" * 300, b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00"):
        host, port = ssl_broker.listeners["SSL"].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(junk)
            # The broker closes the connection (EOF, or a reset after a TLS alert).
            try:
                while raw.recv(1024):
                    pass
            except ConnectionResetError:
                pass
    # A TLS handshake on the plaintext port is refused with a hint in the log.
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    plain_port = int(ssl_broker.bootstrap.split(":")[1])
    with (
        socket.create_connection(("127.0.0.1", plain_port), timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError, OSError)),
    ):
        ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    assert _log_has(ssl_broker, "a TLS handshake? This listener is not SSL")
    roundtrip("kcat", ssl_broker.listeners["SSL"], Security("SSL", ca=pki.ca))


def test_https_listener_serves_the_registry_and_metrics(ssl_broker: BrokerProcess, pki: Pki) -> None:
    assert ssl_broker.http_url is not None and ssl_broker.http_url.startswith("https://127.0.0.1:")
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(f"{ssl_broker.http_url}/subjects", context=ctx, timeout=10) as resp:
        assert resp.status == 200
        assert json.loads(resp.read()) == []
    with urllib.request.urlopen(f"{ssl_broker.http_url}/metrics", context=ctx, timeout=10) as resp:
        assert b"kafka_server_brokertopicmetrics_messagesin_total" in resp.read()
    # Plain HTTP on the TLS port, or a client that does not trust the CA, gets nothing.
    plain = ssl_broker.http_url.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"{plain}/subjects", timeout=10)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(
            f"{ssl_broker.http_url}/subjects", context=ssl.create_default_context(), timeout=10
        )
