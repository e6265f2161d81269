"""Transactional ids coordinated by other brokers, for the console's transactions page on any broker.

Each broker's transaction coordinator holds the ids whose ``__transaction_state`` partition it leads. The
page lists this broker's from memory and asks every other live broker, as Kafka's tools do:
ListTransactions v0 (every id it coordinates), then DescribeTransactions v0 there for their state,
producer, timeout, start time and the partitions of the ongoing transaction. A broker that does not
answer is named on the page (`ClusterTransactions.failed`).
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.broker.broker import Broker
from strom.protocol.api import ApiKey
from strom.protocol.messages import DescribeTransactionsRequest, ListTransactionsRequest
from strom.transaction.coordinator import TxnMetadata
from strom.web.console.remote import LeaderReads

TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class TxnRow:
    transactional_id: str
    state: str  # Kafka's spelling: Ongoing, PrepareCommit, CompleteAbort...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: tuple[tuple[str, int], ...]
    coordinator: int


def local_row(meta: TxnMetadata, coordinator: int) -> TxnRow:
    return TxnRow(
        meta.transactional_id, meta.state.kafka_name, meta.producer_id, meta.producer_epoch, meta.timeout_ms,
        meta.start_ms, tuple(sorted(meta.partitions)), coordinator,
    )  # fmt: skip


class ClusterTransactions:
    def __init__(self, broker: Broker, reads: LeaderReads) -> None:
        self._broker = broker
        self._reads = reads
        self.failed: list[int] = []

    async def rows(self) -> list[TxnRow]:
        """The transactional ids every other live broker coordinates."""
        rows: list[TxnRow] = []
        self.failed = []
        for b in sorted(self._broker.metadata.brokers.values(), key=lambda b: b.node_id):
            if b.node_id == self._broker.node_id:
                continue
            conn = self._reads.broker_connection(b.node_id, b.host, b.port)
            listing: ListTransactionsRequest = {"state_filters": [], "producer_id_filters": []}
            try:
                listed = await conn.send(ApiKey.LIST_TRANSACTIONS, 0, listing, timeout_ms=TIMEOUT_MS)
                ids = sorted(t["transactional_id"] for t in listed["transaction_states"])
                if not ids:
                    continue
                asked: DescribeTransactionsRequest = {"transactional_ids": ids}
                described = await conn.send(ApiKey.DESCRIBE_TRANSACTIONS, 0, asked, timeout_ms=TIMEOUT_MS)
            except ConnectionError:
                self.failed.append(b.node_id)
                continue
            for t in described["transaction_states"]:
                if t["error_code"]:
                    continue  # moved or expired between the two requests
                parts = tuple(sorted((d["topic"], p) for d in t["topics"] for p in d["partitions"]))
                rows.append(
                    TxnRow(
                        t["transactional_id"], t["transaction_state"], t["producer_id"], t["producer_epoch"],
                        t["transaction_timeout_ms"], t["transaction_start_time_ms"], parts, b.node_id,
                    )
                )  # fmt: skip
        return rows
