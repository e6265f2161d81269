"""A minimal asyncio Kafka client connection for broker-to-broker traffic (controller requests, fetchers).

One TCP connection, one request in flight at a time (callers serialise through a lock), requests and
responses encoded by `strom.protocol.codec`. Any failure closes the connection and raises
`ConnectionError`; the next `send` reconnects. Callers own retry and back-off policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from strom.protocol.codec import decode_response, encode_request

_SIZE = struct.Struct(">i")


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, connect_timeout_s: float = 5.0) -> None:
        self.host = host
        self.port = port
        self._client_id = client_id
        self._connect_timeout_s = connect_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()

    async def send(
        self, api_key: int, api_version: int, body: dict[str, Any], timeout_s: float = 30.0
    ) -> dict[str, Any]:
        async with self._lock:
            try:
                return await asyncio.wait_for(self._roundtrip(api_key, api_version, body), timeout_s)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                self.close()
                raise ConnectionError(f"{self.host}:{self.port}: {exc!r}") from exc

    async def _roundtrip(self, api_key: int, api_version: int, body: dict[str, Any]) -> dict[str, Any]:
        reader, writer = self._reader, self._writer
        if writer is None or reader is None or writer.is_closing():
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 22), self._connect_timeout_s
            )
            self._reader, self._writer = reader, writer
        assert reader is not None and writer is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        writer.write(encode_request(api_key, api_version, self._correlation_id, self._client_id, body))
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        payload = await reader.readexactly(size)
        correlation_id, response = decode_response(api_key, api_version, payload)
        if correlation_id != self._correlation_id:
            raise ValueError(f"correlation id {correlation_id} != {self._correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None
