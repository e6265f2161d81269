"""Produce (key 0): validate batch headers, append as leader, answer per partition.

The records are never decoded here: storage checks each batch header and CRC, runs the idempotent
producer checks, patches offsets and appends (DESIGN.md, "Durable, Kafka-shaped storage"). Only the
leader appends (NOT_LEADER_OR_FOLLOWER elsewhere), at the partition's leader epoch, through the replica
manager, which moves the high watermark to the minimum log end offset of the ISR. acks=all checks the ISR
against min.insync.replicas before the append (NOT_ENOUGH_REPLICAS) and, unless the high watermark
already passed the batch (always so on a single node, whose ISR is itself), waits until it does
(replica_manager.wait_for_replication; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrinks).

Produce v0-2 (magic 0/1) is rejected per partition, as Kafka 4 does, while staying advertised for old
librdkafka's feature detection (PROTOCOL-NOTES P10). Also as Kafka: internal topics (__consumer_offsets)
take no client writes, zstd batches need Produce v7+ (KIP-110), transactional batches need the request's
transactional_id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and a failed acks=0 request closes the
connection, since no response can carry the error. With ACLs on, a transactional request needs WRITE on
its transactional id (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and each topic
WRITE (else TOPIC_AUTHORIZATION_FAILED, checked before the topic's existence). The partition checks a
transactional batch's epoch and refuses a plain batch inside its producer's open transaction
(INVALID_TXN_STATE).
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter_ns
from typing import Any

from strom.broker.handlers.authz import Op, Res
from strom.broker.handlers.base import Body, CloseConnection, RequestContext, handles
from strom.broker.partition import Partition
from strom.broker.topic_admin import INTERNAL_TOPICS
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import TRANSACTIONAL_BIT, has_attribute, uses_codec
from strom.storage.log_append import AppendInfo
from strom.storage.log_validator import InvalidRecordsError

log = logging.getLogger(__name__)
_Pending = tuple[dict[str, Any], Partition, int]

ZSTD = 4
MIN_ZSTD_VERSION = 7


def _refused(ctx: RequestContext, topic: str, index: int, records: Any, txn: bool) -> KafkaError | None:
    """Per-partition checks Kafka makes before appending; None if none fails."""
    if not txn and has_attribute(records, TRANSACTIONAL_BIT):
        # Without a transactional id no coordinator would ever end the transaction (a hanging LSO).
        message = "transactional batches need the request's transactional_id"
        return KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message)
    if ctx.api_version < MIN_ZSTD_VERSION and uses_codec(records, ZSTD):
        message = f"zstd batches need Produce v{MIN_ZSTD_VERSION}+, got v{ctx.api_version}"
        return KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, message)
    if topic in INTERNAL_TOPICS:
        return KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic}")
    if records is None or len(records) == 0:
        return KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request without records")
    return None


def _partition_result(index: int, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": int(code),
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "error_message": message,
    }


def _refusal(index: int, exc: KafkaError) -> dict[str, Any]:
    result = _partition_result(index, exc.code, exc.message)
    if isinstance(exc, InvalidRecordsError):  # KIP-467 (Produce v8+): name each refused record
        result["record_errors"] = [
            {"batch_index": e.batch_index, "batch_index_error_message": e.message} for e in exc.record_errors
        ]
    return result


def _appended(index: int, info: AppendInfo) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": 0,
        "base_offset": info.base_offset,
        "log_append_time_ms": info.log_append_time_ms,
        "log_start_offset": info.log_start_offset,
        "error_message": None,
    }


def _append(
    ctx: RequestContext, topic: str, part: dict[str, Any], acks: int, pending: list[_Pending], txn: bool
) -> dict[str, Any]:
    """Append as leader at the partition's epoch; acks=all parks until the ISR has the batch."""
    index = int(part["index"])
    records = part["records"]
    rm = ctx.broker.replica_manager
    try:
        refused = _refused(ctx, topic, index, records, txn)
        if refused is not None:
            raise refused
        partition = rm.leader_partition(topic, index)
        min_isr = partition.log.config.min_insync_replicas
        if acks == -1 and len(partition.isr) < min_isr:
            # As Kafka: not capped by the replication factor (min.insync.replicas=2 on one replica
            # refuses every acks=all write).
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the ISR {partition.isr} has fewer than min.insync.replicas={min_isr} replicas",
            )
        info = rm.append_as_leader(partition, records)
    except KafkaError as exc:
        if (metrics := ctx.broker.metrics) is not None:
            metrics.produce_failed(topic)
        if exc.code not in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.NOT_ENOUGH_REPLICAS,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ):
            log.info("produce to %s-%d from %s rejected: %s", topic, index, ctx.client_id, exc)
        return _refusal(index, exc)
    if (metrics := ctx.broker.metrics) is not None:
        metrics.appended(
            topic, 0 if info.duplicate else info.last_offset - info.base_offset + 1, len(records)
        )
    result = _appended(index, info)
    required = info.last_offset + 1
    if acks == -1 and partition.log.high_watermark < required:
        pending.append((result, partition, required))
    return result


@handles(ApiKey.PRODUCE)
async def handle_produce(ctx: RequestContext, req: Body) -> Body | None:
    acks = int(req["acks"])
    responses = []
    pending: list[_Pending] = []
    auth = ctx.broker.authorizer  # None without ACLs: no per-topic checks at all
    txn_denied = False
    if auth is not None and (txn_id := req.get("transactional_id")) is not None:
        txn_denied = not auth.allowed(ctx.principal, ctx.client_host, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id)
    for topic_data in req["topic_data"]:
        name = topic_data["name"]
        parts = topic_data["partition_data"]
        if auth is not None and (
            txn_denied or not auth.allowed(ctx.principal, ctx.client_host, Op.WRITE, Res.TOPIC, name)
        ):
            code = (
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                if txn_denied
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
            results = [_partition_result(p["index"], code) for p in parts]
        elif ctx.api_version < 3:
            results = [_partition_result(p["index"], ErrorCode.UNSUPPORTED_VERSION) for p in parts]
        elif acks not in (0, 1, -1):
            results = [_partition_result(p["index"], ErrorCode.INVALID_REQUIRED_ACKS) for p in parts]
        else:
            txn = req.get("transactional_id") is not None
            results = [_append(ctx, name, p, acks, pending, txn) for p in parts]
        responses.append({"name": name, "partition_responses": results})
    if acks == 0:
        failed = [
            f"{t['name']}-{p['index']}: {ErrorCode(p['error_code']).name}"
            for t in responses
            for p in t["partition_responses"]
            if p["error_code"]
        ]
        if failed:
            raise CloseConnection(f"produce with acks=0 failed ({', '.join(failed)})")
        return None
    if pending:
        parked = perf_counter_ns()
        await _wait_for_isr(ctx, pending, int(req.get("timeout_ms", 30_000)))
        ctx.remote_ns += perf_counter_ns() - parked
    return {"responses": responses, "throttle_time_ms": 0}


async def _wait_for_isr(ctx: RequestContext, pending: list[_Pending], timeout_ms: int) -> None:
    """acks=all: every appended partition waits until its ISR has the batch."""
    rm = ctx.broker.replica_manager
    if len(pending) == 1:  # the common case: no gather, whose tasks would delay the answer
        _, part, offset = pending[0]
        codes = [await rm.wait_for_replication(part, offset, timeout_ms)]
    else:
        codes = await asyncio.gather(
            *(rm.wait_for_replication(p, offset, timeout_ms) for _, p, offset in pending)
        )
    for (result, _, _), code in zip(pending, codes, strict=True):
        if code != ErrorCode.NONE:
            result["error_code"] = int(code)
            result["base_offset"] = -1
