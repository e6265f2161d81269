"""KIP-890 part 1 in Produce: a transaction's first batch on a partition waits for its coordinator's word.

With ``transaction.partition.verification.enable`` (a dynamic broker config, default true as in Kafka
3.6+), before `produce.py` appends, `verify_request` picks the partitions of the request that this broker
leads whose batch is transactional and would open a transaction there (no open transaction of that
producer and epoch on the partition, and no earlier verification of them still standing:
`strom.storage.txn_verification`), and asks the transactional id's coordinator, through the
transaction service's `TxnVerifier` (one AddPartitionsToTxn v4 ``verify_only`` request when the
coordinator is another broker, a direct look when it is this one). Partitions that fail get Kafka's
error and are not appended; for the others the append checks that the verification still stands
(`still_verified`): a marker that ended the transaction while the question was out voids it.

Errors as Kafka's leader answers them (ReplicaManager, AddPartitionsToTxnManager): the partition is not
in the transaction -> INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce v12, the version of
transaction version 2 clients); PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, which producers expect from
Produce; the coordinator busy, moving or unreachable (CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, NETWORK_EXCEPTION) ->
NOT_ENOUGH_REPLICAS, retriable for every client and no reason for a metadata refresh; anything else
(INVALID_PRODUCER_ID_MAPPING) as the coordinator said.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.broker.handlers.base import RequestContext
from strom.broker.replication.partition import Partition
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import TRANSACTIONAL_BIT, has_attribute, read_header
from strom.storage.txn_verification import VerificationState, in_open_transaction

__all__ = ["VERIFICATION_CONFIG", "Verified", "still_verified", "verify_request"]

VERIFICATION_CONFIG = "transaction.partition.verification.enable"
ABORTABLE_FROM_VERSION = 12
_RETRIABLE = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NETWORK_EXCEPTION,
    }
)


@dataclass(slots=True)
class Verified:
    """The outcome for a request: refusals per (topic, partition), and the producers whose verification
    the append must find still standing."""

    refused: dict[tuple[str, int], KafkaError]
    guarded: dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (producer id, epoch)


NOTHING = Verified({}, {})


def _produce_error(code: ErrorCode, version: int) -> ErrorCode:
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code is ErrorCode.INVALID_TXN_STATE and version >= ABORTABLE_FROM_VERSION:
        return ErrorCode.TRANSACTION_ABORTABLE
    if code in _RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


async def verify_request(
    ctx: RequestContext,
    transactional_id: str,
    topics: list[tuple[str | None, list[tuple[int, memoryview | None]]]],
) -> Verified:
    """Verify the request's transaction-opening batches with the coordinator (module docstring)."""
    if not ctx.ports.config_entities.dynamic.value(VERIFICATION_CONFIG):
        return NOTHING
    rm = ctx.ports.replica_manager
    # (producer id, epoch) -> the partitions to ask for, with each partition and its guard
    asks: dict[tuple[int, int], list[tuple[tuple[str, int], VerificationState, object]]] = {}
    for name, parts in topics:
        if name is None:
            continue
        for index, records in parts:
            if records is None or not has_attribute(records, TRANSACTIONAL_BIT):
                continue
            try:
                header = read_header(records)
                partition = rm.leader_partition(name, index)
            except KafkaError:
                continue  # the append answers these
            pid, epoch = header.producer_id, header.producer_epoch
            state, producer = rm.txn_verification(partition, pid)
            if state.verified(pid, epoch) or in_open_transaction(producer, epoch):
                continue
            asks.setdefault((pid, epoch), []).append(((name, index), state, state.begin(pid, epoch)))
    if not asks:
        return NOTHING
    outcome = Verified({}, {})
    verifier = ctx.ports.transactions.verifier
    for (pid, epoch), wanted in asks.items():
        verdicts = await verifier.verify(transactional_id, pid, epoch, [tp for tp, _, _ in wanted])
        for tp, state, guard in wanted:
            code = verdicts.get(tp, ErrorCode.NONE)
            if code is ErrorCode.NONE:
                state.confirm(pid, guard)
                outcome.guarded[tp] = (pid, epoch)
            else:
                state.fail(pid, guard)
                message = f"transaction verification for producer {pid} failed: {code.name}"
                outcome.refused[tp] = KafkaError(_produce_error(code, ctx.api_version), message)
    return outcome


def still_verified(
    ctx: RequestContext, partition: Partition, producer_id: int, producer_epoch: int
) -> KafkaError | None:
    """None if a verified producer may append now, else the refusal (its transaction ended meanwhile)."""
    state, producer = ctx.ports.replica_manager.txn_verification(partition, producer_id)
    if state.verified(producer_id, producer_epoch) or in_open_transaction(producer, producer_epoch):
        return None
    code = _produce_error(ErrorCode.INVALID_TXN_STATE, ctx.api_version)
    return KafkaError(code, "the transaction ended while its batch was verified")
