"""Following ``_schemas`` from a broker that holds no replica of it: Fetch from its leader, as a consumer.

A broker outside ``_schemas``' replica set still answers registry reads from its own state. It reads the
topic like any consumer: Fetch v4 (replica id -1, so only records below the leader's high watermark,
that is committed ones) from the leader the metadata cache names, long-polling ``max_wait_ms``, from the
next offset it has not replayed. The caller (`RegistryService`) applies the records and keeps the offset.

Call only from the broker's event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from strom._util.clock import Clock
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.codec import RecordsRegion
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import FetchRequest
from strom.protocol.records.builder import RecordValidationError, decode_batches

log = logging.getLogger(__name__)

FETCH_VERSION = 4
MAX_WAIT_MS = 500
MAX_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Fetched:
    """Records at or after the offset asked for, and the offset to fetch next. ``reset``: the offset
    is out of the leader's range; replay from the log start."""

    records: list[tuple[int, bytes | None, bytes | None]]
    next_offset: int
    reset: bool = False


class RemoteLogReader:
    def __init__(
        self,
        topic: str,
        metadata: ClusterMetadataStore,
        client_id: str,
        security: ClientSecurity,
        clock: Clock,
    ) -> None:
        self.topic = topic
        self._security = security
        self._clock = clock
        self._metadata = metadata
        self._client_id = client_id
        self._connection: BrokerConnection | None = None
        self._failing = False  # log the first failure of a streak only (a leader restarting fails often)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def fetch(self, offset: int) -> Fetched | None:
        """One Fetch of partition 0 from ``offset``; None when there is no leader or no answer."""
        leader = self._metadata.partition_leader(self.topic, 0)
        if leader is None:
            return None
        conn = self._connection
        if conn is None or (conn.host, conn.port) != (leader.host, leader.port):
            self.close()
            conn = self._connection = BrokerConnection(
                leader.host, leader.port, self._client_id, self._security, self._clock
            )
        body: FetchRequest = {
            "replica_id": -1,
            "max_wait_ms": MAX_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": MAX_BYTES,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": self.topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": MAX_BYTES}
                    ],
                }
            ],
        }
        try:
            response = await conn.send(ApiKey.FETCH, FETCH_VERSION, body, timeout_ms=MAX_WAIT_MS + 10_000)
            part = response["responses"][0]["partitions"][0]
            code = ErrorCode(int(part["error_code"]))
        except (ConnectionError, LookupError, ValueError) as exc:
            if not self._failing:
                log.info("%s: fetching from broker %d failed: %s", self.topic, leader.node_id, exc)
            self._failing = True
            self.close()
            return None
        self._failing = False
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            return Fetched([], 0, reset=True)
        records = part["records"]
        if code is not ErrorCode.NONE or isinstance(records, RecordsRegion):  # (decoded: never a region)
            return None
        return _decoded(self.topic, records, offset)


def _decoded(topic: str, data: bytes | bytearray | memoryview | None, offset: int) -> Fetched | None:
    if not data:
        return Fetched([], offset)
    try:
        batches = decode_batches(data)  # a trailing partial batch is left for the next fetch
    except RecordValidationError as exc:
        log.error("%s: unreadable batch fetched at offset %d (%s); retrying", topic, offset, exc)
        return None
    records = [
        (r.offset, r.key, r.value)
        for batch in batches
        if not batch.is_control
        for r in batch.records
        if r.offset >= offset
    ]
    return Fetched(records, batches[-1].next_offset if batches else offset)
