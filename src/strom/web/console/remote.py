"""The message browser's reads of a partition this broker hosts no replica of: over the Kafka protocol,
from the partition's leader, so that every broker's console browses every partition.

`LeaderReads` keeps one `BrokerConnection` per leader asked (the broker's own inter-broker security: the
HTTP side has already checked the person's READ on the topic) and closes them at shutdown. A
`RemoteSource` is one partition's `PartitionSource`: ListOffsets v2 as a consumer for the log start
offset (earliest), the high watermark (latest, read_uncommitted) and an offset by time; Fetch v11 as a
consumer for whole batches below the high watermark. The leader is looked up in the metadata cache on
each call, so a page follows a leader change; an error answer raises `RemoteReadError`, shown on the
page.
"""

from __future__ import annotations

from strom.broker.broker import Broker
from strom.broker.network.net_client import BrokerConnection
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import FetchRequest, ListOffsetsRequest
from strom.protocol.primitives import RecordsRegion

FETCH_VERSION = 11
LIST_OFFSETS_VERSION = 2
EARLIEST, LATEST = -2, -1
CONSUMER = -1
TIMEOUT_MS = 10_000


class RemoteReadError(Exception):
    pass


class LeaderReads:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._connections: dict[int, BrokerConnection] = {}

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def connection(self, topic: str, index: int) -> BrokerConnection:
        """A connection to the partition's leader now."""
        leader = self._broker.metadata.partition_leader(topic, index)
        if leader is None:
            raise RemoteReadError(f"{topic}-{index} has no leader now")
        return self.broker_connection(leader.node_id, leader.host, leader.port)

    def broker_connection(self, node_id: int, host: str, port: int) -> BrokerConnection:
        conn = self._connections.get(node_id)
        if conn is None or (conn.host, conn.port) != (host, port):
            if conn is not None:
                conn.close()
            conn = self._connections[node_id] = BrokerConnection(
                host,
                port,
                f"console-{self._broker.node_id}",
                self._broker.inter_broker_security,
                self._broker.clock,
            )
        return conn


class RemoteSource:
    def __init__(self, reads: LeaderReads, topic: str, index: int) -> None:
        self._reads = reads
        self._topic = topic
        self._index = index

    async def _list_offset(self, timestamp: int) -> int:
        body: ListOffsetsRequest = {
            "replica_id": CONSUMER,
            "isolation_level": 0,
            "topics": [
                {
                    "name": self._topic,
                    "partitions": [{"partition_index": self._index, "timestamp": timestamp}],
                }
            ],
        }
        try:
            conn = self._reads.connection(self._topic, self._index)
            response = await conn.send(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body, TIMEOUT_MS)
        except ConnectionError as exc:
            raise RemoteReadError(str(exc)) from None
        part = response["topics"][0]["partitions"][0]
        if int(part["error_code"]):
            raise RemoteReadError(f"the leader answered {ErrorCode(int(part['error_code'])).name}")
        return int(part["offset"])

    async def bounds(self) -> tuple[int, int]:
        return await self._list_offset(EARLIEST), await self._list_offset(LATEST)

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        found = await self._list_offset(timestamp_ms)
        return None if found < 0 else found

    async def read(self, offset: int, max_bytes: int) -> bytes:
        body: FetchRequest = {
            "replica_id": CONSUMER,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": self._topic,
                    "partitions": [
                        {
                            "partition": self._index,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        try:
            conn = self._reads.connection(self._topic, self._index)
            response = await conn.send(ApiKey.FETCH, FETCH_VERSION, body, timeout_ms=TIMEOUT_MS)
        except ConnectionError as exc:
            raise RemoteReadError(str(exc)) from None
        part = response["responses"][0]["partitions"][0]
        if int(part["error_code"]):
            raise RemoteReadError(f"the leader answered {ErrorCode(int(part['error_code'])).name}")
        records = part["records"]
        if records is None:
            return b""
        if isinstance(records, RecordsRegion):  # only a broker's own responses hold file regions
            raise RemoteReadError("the leader's answer held no record bytes")
        return bytes(records)
