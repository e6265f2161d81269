"""TLS listeners on asyncio's own event loop (the broker processes run uvloop): a good client's
requests are served over the TLS transport that start_tls gives, a client certificate from an untrusted
CA is refused and logged with its address, and the listener keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from pathlib import Path

import pytest

from strom.broker.broker import Broker
from strom.broker.config import BrokerConfig
from strom.broker.network.server import KafkaServer
from strom.broker.security.connection import for_listener
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from tests.integration.certs import make_pki, name


async def _api_versions(port: int, context: ssl.SSLContext) -> dict[str, object]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    try:
        writer.write(encode_request(ApiKey.API_VERSIONS, 0, 7, "t", {}))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, await reader.readexactly(size))
        assert correlation_id == 7
        return body
    finally:
        writer.close()


def test_tls_listener_on_the_asyncio_loop(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="strom.broker.security.tls_accept")
    pki = make_pki(tmp_path / "pki")
    other = make_pki(tmp_path / "other", tag=" other")
    good_cert, good_key = pki.client(name("alice"), "alice")
    bad_cert, bad_key = other.client(name("mallory"), "mallory")

    def client(cert: Path, key: Path) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(cert), str(key))
        return context

    async def main() -> None:
        broker = Broker(
            BrokerConfig(
                {
                    "broker.id": "0",
                    "log.dirs": str(tmp_path / "logs"),
                    "listeners": "SSL://127.0.0.1:0",
                    "ssl.keystore.location": str(pki.broker),
                    "ssl.truststore.location": str(pki.ca),
                    "ssl.client.auth": "required",
                }
            )
        )
        (listener,) = broker.listener_setup.listeners
        server = KafkaServer(
            broker.handler_ports,
            "127.0.0.1",
            0,
            for_listener(broker.config, listener, lambda: broker.credentials),
        )
        _, port = await server.start()
        try:
            assert (await _api_versions(port, client(good_cert, good_key)))["error_code"] == 0
            with contextlib.suppress(ssl.SSLError, OSError, asyncio.IncompleteReadError):
                await _api_versions(port, client(bad_cert, bad_key))
            for _ in range(100):  # the broker's side of the failed handshake is logged soon after
                if any(r.name.endswith("tls_accept") for r in caplog.records):
                    break
                await asyncio.sleep(0.02)
            assert (await _api_versions(port, client(good_cert, good_key)))["error_code"] == 0
        finally:
            await server.stop()
            broker.log_manager.shutdown()

    asyncio.run(main())
    (line,) = [r.getMessage() for r in caplog.records if r.name == "strom.broker.security.tls_accept"]
    assert line.startswith("TLS handshake from 127.0.0.1:")
    assert line.endswith("on SSL failed: CERTIFICATE_VERIFY_FAILED (unable to get local issuer certificate)")
