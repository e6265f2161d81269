"""A blocking Kafka-protocol client for the console's calls that no installed admin client makes.

confluent-kafka 2.16's AdminClient and kafka-python have no share-group calls (ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets); ``strom groups`` sends
them with this module: one TCP connection per broker, one request at a time, bodies encoded and
decoded by `strom.protocol.codec` from the same specs the broker serves. The group's coordinator is
found with FindCoordinator at the first bootstrap server that answers.

Security from ``--command-config``, in librdkafka's names, so the listener the other commands reach is
reached here too: ``security.protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; TLS from
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password`` and
``ssl.endpoint.identification.algorithm``; SASL from ``sasl.mechanism`` (or ``sasl.mechanisms``: PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.username`` and ``sasl.password``. Each new connection logs in
before its first request: SaslHandshake v1 and SaslAuthenticate v1, the exchange the broker itself uses
to reach another broker (`strom.broker.security.client`, with its SCRAM client). The connections live
for one command, so a session lifetime the broker answers (KIP-368) is not renewed. Properties that
only librdkafka reads (``debug``, ``client.id``, ...) are ignored here; a mechanism this client has
not (librdkafka's default GSSAPI, OAUTHBEARER) is refused by name (`supported` says so beforehand).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from strom.broker.security.client import ClientSecurity
from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_python_security import MECHANISMS, PROTOCOLS
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import CorruptFrame, ErrorCode, UnsupportedVersion
from strom.protocol.uuid_text import ZERO_UUID

_SIZE = struct.Struct(">i")
CLIENT_ID = "strom-cli"
GROUP_KEY_TYPE = 0


class LoginRefused(ConsoleError):
    """A broker refused the SASL login: the command ends at once (another bootstrap server would
    refuse the same credentials), where an unreachable broker lets the next one be tried."""


class WireClient:
    """Connections to the brokers of one CLI invocation (use as a context manager)."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._security: ClientSecurity | None = None
        self._sockets: dict[tuple[str, int], socket.socket] = {}
        self._correlation = 0

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def call(self, address: tuple[str, int], api_key: ApiKey, version: int, body: Mapping[str, Any]) -> Any:
        """The broker's answer to one request.

        Raises:
            ConsoleError: the broker could not be reached, or the answer did not parse.
        """
        try:
            sock = self._socket(address)
            return self._roundtrip(sock, int(api_key), version, body)
        except (OSError, CorruptFrame, UnsupportedVersion) as exc:
            self._drop(address)
            raise ConsoleError(f"no answer from {address[0]}:{address[1]}: {exc}") from None

    @property
    def timeout_s(self) -> float:
        """The command's bound for one request (``--timeout``), also its bound for retrying one."""
        return self._options.timeout_s

    def coordinator(self, group_id: str) -> tuple[str, int]:
        """(host, port) of the group's coordinator.

        Raises:
            ConsoleError: no bootstrap server answered, or none knows the coordinator.
        """
        failures: list[str] = []
        for address in _bootstrap(self._options.bootstrap_servers):
            try:
                found = self.call(
                    address, ApiKey.FIND_COORDINATOR, 2, {"key": group_id, "key_type": GROUP_KEY_TYPE}
                )
            except LoginRefused:
                raise
            except ConsoleError as exc:
                failures.append(str(exc))
                continue
            if found["error_code"]:
                raise ConsoleError(
                    f"no coordinator for group {group_id!r}: {ErrorCode(found['error_code']).name}"
                )
            return str(found["host"]), int(found["port"])
        raise ConsoleError(f"cannot find the coordinator of group {group_id!r}: {'; '.join(failures)}")

    def brokers(self) -> list[tuple[str, int]]:
        """Every broker's (host, port), by Metadata at the first bootstrap server that answers.

        Raises:
            ConsoleError: no bootstrap server answered.
        """
        return sorted((str(b["host"]), int(b["port"])) for b in self.metadata([])["brokers"])

    def metadata(self, topics: list[str]) -> Any:
        """A Metadata answer for ``topics`` (none: the brokers only) from the first bootstrap server
        that answers.

        Raises:
            ConsoleError: no bootstrap server answered.
        """
        body = {
            "topics": [{"topic_id": ZERO_UUID, "name": name} for name in topics],
            "allow_auto_topic_creation": False,
        }
        failures: list[str] = []
        for address in _bootstrap(self._options.bootstrap_servers):
            try:
                return self.call(address, ApiKey.METADATA, 12, body)
            except LoginRefused:
                raise
            except ConsoleError as exc:
                failures.append(str(exc))
        raise ConsoleError(f"cannot read the cluster's metadata: {'; '.join(failures)}")

    def _socket(self, address: tuple[str, int]) -> socket.socket:
        sock = self._sockets.get(address)
        if sock is None:
            if self._security is None:
                self._security = client_security(self._options.command_config)  # refuses what it cannot
            tls = self._security.tls
            raw = socket.create_connection(address, timeout=self._options.timeout_s)
            sock = raw if tls is None else tls.wrap_socket(raw, server_hostname=address[0])
            self._sockets[address] = sock
            try:
                asyncio.run(self._security.authenticate(self._exchanger(sock)))
            except ConnectionError as exc:
                self._drop(address)
                raise LoginRefused(
                    f"SASL authentication refused by {address[0]}:{address[1]}: {exc}"
                ) from None
        return sock

    def _exchanger(self, sock: socket.socket) -> Any:
        """The login's request sender over ``sock`` (blocking: the login runs before anything else)."""

        async def exchange(api_key: int, version: int, body: Mapping[str, Any], timeout_ms: int = 0) -> Any:
            del timeout_ms  # the socket's own timeout bounds each read
            return self._roundtrip(sock, api_key, version, body)

        return exchange

    def _roundtrip(self, sock: socket.socket, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        self._correlation += 1
        sock.sendall(encode_request(api_key, version, self._correlation, CLIENT_ID, body))
        (size,) = _SIZE.unpack(self._read(sock, 4))
        correlation, answer = decode_response(api_key, version, self._read(sock, size))
        if correlation != self._correlation:
            raise CorruptFrame(f"answer to request {correlation}, expected {self._correlation}")
        return answer

    def _drop(self, address: tuple[str, int]) -> None:
        sock = self._sockets.pop(address, None)
        if sock is not None:
            sock.close()

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            got = sock.recv(n - len(chunks))
            if not got:
                raise ConnectionError("connection closed by the broker")
            chunks += got
        return bytes(chunks)


def _bootstrap(servers: str) -> list[tuple[str, int]]:
    addresses: list[tuple[str, int]] = []
    for item in servers.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConsoleError(f"bootstrap server {item.strip()!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def supported(options: ClientOptions) -> bool:
    """Whether this client can connect with the CLI's security settings (`client_security` accepts
    them)."""
    try:
        client_security(options.command_config)
    except ConsoleError:
        return False
    return True


def client_security(config: Mapping[str, str]) -> ClientSecurity:
    """TLS and SASL login for librdkafka's security properties ``config``.

    Raises:
        ConsoleError: a protocol or mechanism this client does not speak, or a TLS file it cannot load.
    """
    protocol = config.get("security.protocol", "plaintext").upper()
    if protocol not in PROTOCOLS:
        raise ConsoleError(
            f"--command-config security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}"
        )
    tls = _tls_context(config) if protocol in ("SSL", "SASL_SSL") else None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(tls)
    # librdkafka's default mechanism is GSSAPI, which no part of Strom speaks.
    mechanism = config.get("sasl.mechanism", config.get("sasl.mechanisms", "GSSAPI")).upper()
    if mechanism not in MECHANISMS:
        raise ConsoleError(
            f"strom's own protocol client (share groups, lag, Iceberg lag) logs in with "
            f"{', '.join(MECHANISMS)}, not sasl.mechanism={mechanism}"
        )
    return ClientSecurity(tls, mechanism, config.get("sasl.username", ""), config.get("sasl.password", ""))


def _tls_context(config: Mapping[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    cert = config.get("ssl.certificate.location")
    if cert:
        context.load_cert_chain(cert, config.get("ssl.key.location"), config.get("ssl.key.password"))
    return context
