"""KIP-890 part 1, the asking side: a partition leader asks a transactional id's coordinator whether the
producer's ongoing transaction holds some partitions (AddPartitionsToTxn v4+ with ``verify_only``).

When this broker coordinates the id, the coordinator answers directly (`TransactionService.verify_partitions`,
no request). Otherwise the question goes to the coordinator, the leader of the id's
``__transaction_state`` partition, as Kafka's ``AddPartitionsToTxnManager`` sends it: per coordinator at
most one AddPartitionsToTxn v4 in flight, and the questions that arrive meanwhile wait and leave
together as the next one, one entry per transactional id. Two questions for one id in one batch: with
the same producer id and epoch they are merged (two produce requests of one producer to this leader);
a newer epoch replaces an older one, which is answered INVALID_PRODUCER_EPOCH, and an older epoch than
the one waiting is answered INVALID_PRODUCER_EPOCH at once (Kafka's rule). A lost connection or a
timeout answers NETWORK_EXCEPTION; a refused request as a whole (CLUSTER_AUTHORIZATION_FAILED) answers
INVALID_TXN_STATE, so clients never see an inter-broker authorization error.

The produce path (`strom.broker.handlers.produce_verification`) maps these answers to what a producer
understands; the per-partition cache that spares later batches the question is the partition's
(`strom.storage.txn_verification`).

Call only from the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from strom._util.clock import Clock
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnRequestTransaction

log = logging.getLogger(__name__)

__all__ = ["TxnVerifier", "Verdicts"]

VERIFY_VERSION = 4  # the first version with verify_only
VERIFY_TIMEOUT_MS = 5_000

TopicPartition = tuple[str, int]
Verdicts = dict[TopicPartition, ErrorCode]
# (transactional id, producer id, epoch, partitions) -> the local coordinator's verdicts
LocalVerify = Callable[[str, int, int, list[TopicPartition]], Verdicts]
# transactional id -> (node id, host, port) of its coordinator, None if unknown
CoordinatorLookup = Callable[[str], tuple[int, str, int] | None]


@dataclass(slots=True)
class _Question:
    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)
    waiters: list[asyncio.Future[Verdicts]] = field(default_factory=list)

    def answer(self, verdicts: Verdicts) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(verdicts)


class TxnVerifier:
    def __init__(
        self,
        node_id: int,
        local: LocalVerify,
        coordinator_of: CoordinatorLookup,
        metadata: ClusterMetadataStore,
        security: ClientSecurity,
        clock: Clock,
    ) -> None:
        self._node_id = node_id
        self._local = local
        self._coordinator_of = coordinator_of
        self._metadata = metadata
        self._security = security
        self._clock = clock
        self._waiting: dict[int, dict[str, _Question]] = {}  # coordinator -> id -> the next batch's entry
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self.questions = 0  # verifications asked (each a coordinator look or part of a request)
        self.requests = 0  # AddPartitionsToTxn requests sent to other coordinators

    def close(self) -> None:
        for task in self._senders.values():
            task.cancel()
        self._senders.clear()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition]
    ) -> Verdicts:
        """The coordinator's verdict for each partition (NONE: in the ongoing transaction)."""
        self.questions += 1
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        node = coordinator[0]
        if node == self._node_id:
            return self._local(transactional_id, producer_id, producer_epoch, partitions)
        batch = self._waiting.setdefault(node, {})
        question = batch.get(transactional_id)
        if question is not None and (question.producer_id, question.producer_epoch) != (
            producer_id,
            producer_epoch,
        ):
            if producer_epoch < question.producer_epoch:
                return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_EPOCH)
            question.answer(dict.fromkeys(question.partitions, ErrorCode.INVALID_PRODUCER_EPOCH))
            question = None
        if question is None:
            question = batch[transactional_id] = _Question(producer_id, producer_epoch)
        question.partitions.update(partitions)
        waiter: asyncio.Future[Verdicts] = asyncio.get_running_loop().create_future()
        question.waiters.append(waiter)
        if node not in self._senders:
            task = asyncio.create_task(self._send_batches(node))
            self._senders[node] = task
        verdicts = await waiter
        return {tp: verdicts.get(tp, ErrorCode.NONE) for tp in partitions}

    async def _send_batches(self, node: int) -> None:
        """Send the waiting questions for ``node`` as one request, then the ones that came meanwhile."""
        try:
            while batch := self._waiting.pop(node, None):
                try:
                    answers = await self._ask(node, batch)
                except asyncio.CancelledError:
                    for question in batch.values():
                        question.answer(dict.fromkeys(question.partitions, ErrorCode.NETWORK_EXCEPTION))
                    raise
                for tid, question in batch.items():
                    question.answer(answers.get(tid, {}))
        finally:
            if self._senders.get(node) is asyncio.current_task():
                del self._senders[node]

    async def _ask(self, node: int, batch: dict[str, _Question]) -> dict[str, Verdicts]:
        def every(code: ErrorCode) -> dict[str, Verdicts]:
            return {tid: dict.fromkeys(q.partitions, code) for tid, q in batch.items()}

        broker = self._metadata.brokers.get(node)
        if broker is None:
            return every(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        connection = self._connections.get(node)
        if connection is None or (connection.host, connection.port) != (broker.host, broker.port):
            if connection is not None:
                connection.close()
            connection = self._connections[node] = BrokerConnection(
                broker.host, broker.port, f"txn-verifier-{self._node_id}", self._security, self._clock
            )
        transactions: list[AddPartitionsToTxnRequestTransaction] = []
        for tid, question in batch.items():
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(question.partitions):
                topics.setdefault(topic, []).append(partition)
            transactions.append(
                {
                    "transactional_id": tid,
                    "producer_id": question.producer_id,
                    "producer_epoch": question.producer_epoch,
                    "verify_only": True,
                    "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
                }
            )
        request: AddPartitionsToTxnRequest = {"transactions": transactions}
        self.requests += 1
        try:
            response = await connection.send(
                ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, request, VERIFY_TIMEOUT_MS
            )
        except ConnectionError as exc:
            log.info("verifying transactions with broker %d failed: %s", node, exc)
            return every(ErrorCode.NETWORK_EXCEPTION)
        top = ErrorCode(int(response.get("error_code", 0)))
        if top is not ErrorCode.NONE:
            log.warning("broker %d refused transaction verification: %s", node, top.name)
            return every(
                ErrorCode.INVALID_TXN_STATE if top is ErrorCode.CLUSTER_AUTHORIZATION_FAILED else top
            )
        out: dict[str, Verdicts] = {}
        for result in response.get("results_by_transaction", []):
            verdicts = out.setdefault(result["transactional_id"], {})
            for answered in result["topic_results"]:
                for part in answered["results_by_partition"]:
                    verdicts[(answered["name"], int(part["partition_index"]))] = ErrorCode(
                        int(part["partition_error_code"])
                    )
        return out
