"""Failed TLS handshakes are logged, one line each with the peer's address and OpenSSL's reason, and
no more than `LOG_BURST` per listener in `LOG_WINDOW_S` however many fail: a client certificate from
an untrusted CA under ``ssl.client.auth=required``, plaintext garbage on an SSL port, and a flood of
it, and plain HTTP to the ``https://`` HTTP listener, while the broker keeps serving a good client."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker.security.tls_accept import LOG_BURST
from strom.testing.broker_process import BrokerProcess
from tests.integration.certs import Pki, make_pki, name
from tests.integration.secure_clients import Security, roundtrip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.location": str(pki.broker),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "http.listeners": "https://127.0.0.1:0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("tlslog") / "data", overrides) as broker:
        yield broker


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def _handshake_lines(broker: BrokerProcess, listener: str) -> list[str]:
    marker = f"on {listener} failed: "
    return [
        line
        for line in broker.log_path.read_text().splitlines()
        if "TLS handshake from" in line and marker in line
    ]


def _wait_for_line(broker: BrokerProcess, pattern: str) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in broker.log_path.read_text().splitlines():
            if re.search(pattern, line):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line matching {pattern!r}")


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while sock.recv(1024):
            pass


def test_an_untrusted_client_certificate_is_logged(
    tls_broker: BrokerProcess, pki: Pki, tmp_path: Path
) -> None:
    other = make_pki(tmp_path / "other", tag=" other")
    cert, key = other.client(name("mallory"), "mallory")
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection(_address(tls_broker.listeners["MTLS"]), timeout=10) as raw:
        port = raw.getsockname()[1]
        with contextlib.suppress(ssl.SSLError, OSError):
            tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            _drain(tls)  # TLS 1.3: the client learns of the refusal after its side of the handshake
    line = _wait_for_line(tls_broker, rf"TLS handshake from 127\.0\.0\.1:{port} on MTLS failed: ")
    assert "CERTIFICATE_VERIFY_FAILED (unable to get local issuer certificate)" in line
    assert "mallory" not in line and "BEGIN" not in line  # nothing of the certificate itself


def test_garbage_and_a_flood_of_it_are_logged_within_the_limit(tls_broker: BrokerProcess, pki: Pki) -> None:
    address = _address(tls_broker.listeners["SSL"])
    with socket.create_connection(address, timeout=10) as raw:
        port = raw.getsockname()[1]
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        _drain(raw)
    line = _wait_for_line(tls_broker, rf"TLS handshake from 127\.0\.0\.1:{port} on SSL failed: [A-Z_]+")
    assert "GET" not in line.split("failed:")[1]  # OpenSSL's reason, not the bytes sent
    started = time.monotonic()
    for _ in range(60):
        with socket.create_connection(address, timeout=10) as raw:
            raw.sendall(b"\x16\x03\x01\x00\x05hello" + b"\xff" * 64)
            _drain(raw)
    # Every one was refused and handled; the log got at most a burst per window of them.
    windows = int((time.monotonic() - started) // 10) + 1
    time.sleep(0.5)
    assert 1 <= len(_handshake_lines(tls_broker, "SSL")) <= LOG_BURST * windows + 1
    # A good client is served all along.
    roundtrip("confluent-kafka", tls_broker.listeners["SSL"], Security("SSL", ca=pki.ca))


def test_plain_http_to_the_https_listener_is_logged(tls_broker: BrokerProcess, pki: Pki) -> None:
    assert tls_broker.http_url is not None and tls_broker.http_url.startswith("https://")
    address = _address(tls_broker.http_url.removeprefix("https://"))
    with socket.create_connection(address, timeout=10) as raw:
        port = raw.getsockname()[1]
        raw.sendall(b"GET /subjects HTTP/1.1\r\nHost: x\r\n\r\n")
        _drain(raw)
    line = _wait_for_line(tls_broker, rf"TLS handshake from 127\.0\.0\.1:{port} on HTTP failed: ")
    assert "HTTP_REQUEST" in line
    context = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(f"{tls_broker.http_url}/subjects", timeout=10, context=context) as answer:
        assert answer.status == 200 and json.loads(answer.read()) == []


def test_a_connection_closed_before_any_tls_is_not_a_warning(tls_broker: BrokerProcess) -> None:
    address = _address(tls_broker.listeners["MTLS"])
    with socket.create_connection(address, timeout=10) as probe:  # a TCP health check
        probe_port = probe.getsockname()[1]
    with socket.create_connection(address, timeout=10) as raw:  # then a failure, logged after it
        port = raw.getsockname()[1]
        raw.sendall(b"\x16\x03\x01\x00\x05hello")
        _drain(raw)
    _wait_for_line(tls_broker, rf"TLS handshake from 127\.0\.0\.1:{port} on MTLS failed: ")
    assert not [line for line in _handshake_lines(tls_broker, "MTLS") if f":{probe_port} " in line]
