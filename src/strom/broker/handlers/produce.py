"""Produce (key 0): validate batch headers, append as leader, answer per partition.

The records are never decoded here: storage checks each batch header and CRC, runs the idempotent
producer checks, patches offsets and appends. Only the leader appends (NOT_LEADER_OR_FOLLOWER
elsewhere), at the partition's leader epoch, through `ReplicaManager.append_records`: the partition
checks the ISR against the min ISR for acks=all (NOT_ENOUGH_REPLICAS; partition.py and isr_rules.py
own that rule) and moves the high watermark. acks=all then waits, unless the high
watermark already passed the batch (always so on a single node, whose ISR is itself), until it does
(`ReplicaManager.wait_for_replication`; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrinks below the
min ISR).

Produce v0-2 (magic 0/1) is rejected per partition, as Kafka 4 does, while staying advertised for old
librdkafka's feature detection (docs/protocol.md#why-the-minimums-are-low). Also as Kafka: internal topics
(__consumer_offsets) take no client writes, zstd batches need Produce v7+ (KIP-110), transactional batches
need the request's transactional_id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and a failed acks=0 request
closes the connection, since no response can carry the error. With ACLs on, a transactional request needs
WRITE on its transactional id (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and each
topic WRITE (else TOPIC_AUTHORIZATION_FAILED, checked before the topic's existence). The partition checks a
transactional batch's epoch and refuses a plain batch inside its producer's open transaction
(INVALID_TXN_STATE). With ``transaction.partition.verification.enable`` (KIP-890 part 1) a batch that
would open a transaction on a partition is first verified with the transaction coordinator
(produce_verification.py). From v10 a partition refused because its leader moved names the new leader, and
from v13 topics are named by id (UNKNOWN_TOPIC_ID for an unknown one): topic_ids.py.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter_ns

from strom.broker.control.topic_admin import INTERNAL_TOPICS
from strom.broker.handlers.authz import Op, Res
from strom.broker.handlers.base import CloseConnection, RequestContext, handles
from strom.broker.handlers.produce_verification import NOTHING, Verified, still_verified, verify_request
from strom.broker.handlers.topic_ids import LEADER_MOVED, leader_hint, node_endpoints
from strom.broker.replication.partition import Partition
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.produce_codec import LeanProduceRequest, LeanProduceResponse, PartitionResult
from strom.protocol.records.batch import TRANSACTIONAL_BIT, has_attribute, uses_codec
from strom.storage.log_validator import InvalidRecordsError

log = logging.getLogger(__name__)
_Pending = tuple[PartitionResult, Partition, int]

ZSTD = 4
MIN_ZSTD_VERSION = 7
NEW_LEADER_VERSION = 10  # current_leader and node_endpoints (KIP-951)
# PartitionResult positions (produce_codec.py)
_ERROR_CODE, _BASE_OFFSET = 1, 2


def _refused(
    topic: str, records: memoryview | None, txn: bool, internal: bool, version: int
) -> KafkaError | None:
    """Per-partition checks Kafka makes before appending; None if none fails. ``internal`` and
    ``version`` (the request's) are looked up once per topic by the caller."""
    if not txn and has_attribute(records, TRANSACTIONAL_BIT):
        # Without a transactional id no coordinator would ever end the transaction (a hanging LSO).
        message = "transactional batches need the request's transactional_id"
        return KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message)
    if version < MIN_ZSTD_VERSION and uses_codec(records, ZSTD):
        message = f"zstd batches need Produce v{MIN_ZSTD_VERSION}+, got v{version}"
        return KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, message)
    if internal:
        return KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic}")
    if records is None or len(records) == 0:
        return KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request without records")
    return None


def _partition_result(index: int, code: ErrorCode, message: str | None = None) -> PartitionResult:
    return [index, int(code), -1, -1, -1, message, ()]


def _refusal(index: int, exc: KafkaError) -> PartitionResult:
    result = _partition_result(index, exc.code, exc.message)
    if isinstance(exc, InvalidRecordsError):  # KIP-467 (Produce v8+): name each refused record
        result[6] = [(e.batch_index, e.message) for e in exc.record_errors]
    return result


def _append_topic(
    ctx: RequestContext,
    topic: str,
    parts: list[tuple[int, memoryview | None]],
    acks: int,
    pending: list[_Pending],
    txn: bool,
    verified: Verified = NOTHING,
) -> list[PartitionResult]:
    """Append each partition's records as leader at its epoch; acks=all parks until the ISR has them.

    The per-request and per-topic facts are looked up once here: this loop runs once per partition of
    the request (a thousand times for a producer spread over a thousand partitions).
    """
    rm = ctx.ports.replica_manager
    metrics = ctx.ports.metrics
    internal, version = topic in INTERNAL_TOPICS, ctx.api_version
    results: list[PartitionResult] = []
    appended = records_in = bytes_in = 0
    for index, records in parts:
        try:
            if (refused := _refused(topic, records, txn, internal, version)) is not None:
                raise refused
            assert records is not None  # _refused answers CORRUPT_MESSAGE for null records
            if verified is not NOTHING and (refusal := verified.refused.get((topic, index))) is not None:
                raise refusal
            partition = rm.leader_partition(topic, index)
            guarded = None if verified is NOTHING else verified.guarded.get((topic, index))
            if guarded is not None and (refusal := still_verified(ctx, partition, *guarded)) is not None:
                raise refusal
            info = rm.append_records(partition, records, acks)
        except KafkaError as exc:
            if metrics is not None:
                metrics.produce_failed(topic)
            if exc.code not in (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ):
                log.info("produce to %s-%d from %s rejected: %s", topic, index, ctx.client_id, exc)
            results.append(_refusal(index, exc))
            continue
        appended += 1
        if not info.duplicate:
            records_in += info.last_offset - info.base_offset + 1
        bytes_in += len(records)
        result = [index, 0, info.base_offset, info.log_append_time_ms, info.log_start_offset, None, ()]
        results.append(result)
        if acks == -1 and partition.high_watermark <= info.last_offset:
            pending.append((result, partition, info.last_offset + 1))
    if metrics is not None and appended:
        metrics.appended(topic, records_in, bytes_in, appended)
    return results


@handles(ApiKey.PRODUCE)
async def handle_produce(ctx: RequestContext, req: LeanProduceRequest) -> LeanProduceResponse | None:
    """The body is in produce_codec's lean form, whatever the version (codec.py converts v0-2)."""
    acks = int(req["acks"])
    topics = req["topic_data"]
    responses: list[tuple[str, list[PartitionResult]]] = []
    pending: list[_Pending] = []
    auth = ctx.ports.authorizer  # None without ACLs: no per-topic checks at all
    transactional_id = req["transactional_id"]
    txn = transactional_id is not None
    txn_denied = False
    if auth is not None and transactional_id is not None:
        txn_denied = not auth.allowed(
            ctx.principal, ctx.client_host, Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id
        )
    topic_ids = req.get("topic_ids")
    names: list[str | None] = _names_of(ctx, topic_ids) if topic_ids is not None else [n for n, _ in topics]
    verified = NOTHING
    if transactional_id is not None and not txn_denied and ctx.api_version >= 3:
        parked = perf_counter_ns()
        verified = await verify_request(
            ctx, transactional_id, [(name, parts) for name, (_, parts) in zip(names, topics, strict=True)]
        )
        ctx.remote_ns += perf_counter_ns() - parked
    for name, (_, parts) in zip(names, topics, strict=True):
        if name is None:
            responses.append(
                ("", [_partition_result(index, ErrorCode.UNKNOWN_TOPIC_ID) for index, _ in parts])
            )
            continue
        if auth is not None and (
            txn_denied or not auth.allowed(ctx.principal, ctx.client_host, Op.WRITE, Res.TOPIC, name)
        ):
            code = (
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                if txn_denied
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
            results = [_partition_result(index, code) for index, _ in parts]
        elif ctx.api_version < 3:
            results = [_partition_result(index, ErrorCode.UNSUPPORTED_VERSION) for index, _ in parts]
        elif acks not in (0, 1, -1):
            results = [_partition_result(index, ErrorCode.INVALID_REQUIRED_ACKS) for index, _ in parts]
        else:
            results = _append_topic(ctx, name, parts, acks, pending, txn, verified)
        responses.append((name, results))
    if acks == 0:
        failed = [
            f"{name}-{p[0]}: {ErrorCode(p[_ERROR_CODE]).name}"
            for name, results in responses
            for p in results
            if p[_ERROR_CODE]
        ]
        if failed:
            raise CloseConnection(f"produce with acks=0 failed ({', '.join(failed)})")
        return None
    if pending:
        parked = perf_counter_ns()
        await _wait_for_isr(ctx, pending, int(req.get("timeout_ms", 30_000)))
        ctx.remote_ns += perf_counter_ns() - parked
    answer: LeanProduceResponse = {"responses": responses, "throttle_time_ms": 0}
    if topic_ids is not None:
        answer["topic_ids"] = topic_ids
    if ctx.api_version >= NEW_LEADER_VERSION:
        _add_leader_hints(ctx, answer, names)
    return answer


def _names_of(ctx: RequestContext, topic_ids: list[bytes]) -> list[str | None]:
    """v13: each topic's name from its id (None for an id no topic has: UNKNOWN_TOPIC_ID)."""
    return [ctx.ports.metadata.topic_name(bytes(topic_id)) for topic_id in topic_ids]


def _add_leader_hints(ctx: RequestContext, answer: LeanProduceResponse, names: list[str | None]) -> None:
    """KIP-951 (v10+): partitions refused because the leader moved name the current leader, whose
    address goes in ``node_endpoints`` (topic_ids.py)."""
    cache = ctx.ports.metadata
    leaders: list[int] = []
    for name, (_, results) in zip(names, answer["responses"], strict=True):
        for result in results:
            if name is not None and result[_ERROR_CODE] in LEADER_MOVED:
                hint = leader_hint(cache, name, result[0])
                if hint is not None:
                    result.append(hint)
                    leaders.append(hint["leader_id"])
    if leaders:
        answer["node_endpoints"] = [dict(e) for e in node_endpoints(cache, leaders, ctx.listener)]


async def _wait_for_isr(ctx: RequestContext, pending: list[_Pending], timeout_ms: int) -> None:
    """acks=all: every appended partition waits until its ISR has the batch."""
    rm = ctx.ports.replica_manager
    if len(pending) == 1:  # the common case: no gather, whose tasks would delay the answer
        _, part, offset = pending[0]
        codes = [await rm.wait_for_replication(part, offset, timeout_ms)]
    else:
        codes = await asyncio.gather(
            *(rm.wait_for_replication(p, offset, timeout_ms) for _, p, offset in pending)
        )
    for (result, _, _), code in zip(pending, codes, strict=True):
        if code != ErrorCode.NONE:
            result[_ERROR_CODE] = int(code)
            result[_BASE_OFFSET] = -1
