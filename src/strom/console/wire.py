"""A blocking Kafka-protocol client for the console's calls that no installed admin client makes.

confluent-kafka 2.16's AdminClient and kafka-python have no share-group calls (ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets); ``strom groups`` sends
them with this module: one TCP connection per broker, one request at a time, bodies encoded and
decoded by `strom.protocol.codec` from the same specs the broker serves. The group's coordinator is
found with FindCoordinator at the first bootstrap server that answers.

Security from ``--command-config``, in librdkafka's names: ``security.protocol`` PLAINTEXT or SSL
(``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``); a SASL protocol is refused with a one-line error.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import CorruptFrame, ErrorCode, UnsupportedVersion
from strom.protocol.uuid_text import ZERO_UUID

_SIZE = struct.Struct(">i")
CLIENT_ID = "strom-cli"
GROUP_KEY_TYPE = 0


class WireClient:
    """Connections to the brokers of one CLI invocation (use as a context manager)."""

    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._tls = _tls_context(options.command_config) if supported(options) else None
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
        self._correlation += 1
        try:
            sock = self._socket(address)
            sock.sendall(encode_request(int(api_key), version, self._correlation, CLIENT_ID, body))
            (size,) = _SIZE.unpack(self._read(sock, 4))
            correlation, answer = decode_response(int(api_key), version, self._read(sock, size))
        except (OSError, CorruptFrame, UnsupportedVersion) as exc:
            self._drop(address)
            raise ConsoleError(f"no answer from {address[0]}:{address[1]}: {exc}") from None
        if correlation != self._correlation:
            self._drop(address)
            raise ConsoleError(f"{address[0]}:{address[1]} answered another request")
        return answer

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
            except ConsoleError as exc:
                failures.append(str(exc))
        raise ConsoleError(f"cannot read the cluster's metadata: {'; '.join(failures)}")

    def _socket(self, address: tuple[str, int]) -> socket.socket:
        sock = self._sockets.get(address)
        if sock is None:
            _tls_context(self._options.command_config)  # refuses a protocol it cannot speak
            raw = socket.create_connection(address, timeout=self._options.timeout_s)
            sock = raw if self._tls is None else self._tls.wrap_socket(raw, server_hostname=address[0])
            self._sockets[address] = sock
        return sock

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
    """Whether this client can connect with the CLI's security settings (PLAINTEXT or SSL)."""
    return options.command_config.get("security.protocol", "plaintext").lower() in ("plaintext", "ssl")


def _tls_context(config: Mapping[str, str]) -> ssl.SSLContext | None:
    protocol = config.get("security.protocol", "plaintext").lower()
    if protocol == "plaintext":
        return None
    if protocol != "ssl":
        raise ConsoleError(
            f"share-group commands connect with PLAINTEXT or SSL, not security.protocol={protocol.upper()}"
        )
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        context.check_hostname = False
    cert = config.get("ssl.certificate.location")
    if cert:
        context.load_cert_chain(cert, config.get("ssl.key.location"), config.get("ssl.key.password"))
    return context
