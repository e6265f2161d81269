"""Produce (key 0): validate batch headers, append as leader, answer per partition.

The records are never decoded here: storage checks each batch header and CRC, runs the idempotent
producer checks, patches offsets and appends (DESIGN.md, "Durable, Kafka-shaped storage"). With one
replica the ISR is this broker, so the high watermark moves to the log end offset at once and acks=all
needs nothing more than `min.insync.replicas <= 1`. Produce v0-2 (magic 0/1) is rejected per partition,
as Kafka 4 does, while staying advertised for old librdkafka's feature detection (PROTOCOL-NOTES P10).
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker.handlers.base import Body, RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

ISR_SIZE = 1


def _partition_result(index: int, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": int(code),
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "error_message": message,
    }


def _append(ctx: RequestContext, topic: str, part: dict[str, Any], acks: int) -> dict[str, Any]:
    index = int(part["index"])
    records = part["records"]
    broker = ctx.broker
    try:
        plog = broker.partition_log(topic, index)
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "produce request without records")
        if acks == -1 and plog.config.min_insync_replicas > ISR_SIZE:
            raise KafkaError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the ISR has {ISR_SIZE} replica(s), fewer than min.insync.replicas="
                f"{plog.config.min_insync_replicas}",
            )
        info = plog.append_as_leader(records, leader_epoch=0)
    except KafkaError as exc:
        if exc.code not in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS):
            log.info("produce to %s-%d from %s rejected: %s", topic, index, ctx.client_id, exc)
        return _partition_result(index, exc.code, exc.message)
    if not info.duplicate:
        plog.high_watermark = plog.log_end_offset
        broker.purgatory.notify((topic, index))
    return {
        "index": index,
        "error_code": 0,
        "base_offset": info.base_offset,
        "log_append_time_ms": info.log_append_time_ms,
        "log_start_offset": info.log_start_offset,
        "error_message": None,
    }


@handles(ApiKey.PRODUCE)
async def handle_produce(ctx: RequestContext, req: Body) -> Body | None:
    acks = int(req["acks"])
    responses = []
    for topic_data in req["topic_data"]:
        name = topic_data["name"]
        parts = topic_data["partition_data"]
        if ctx.api_version < 3:
            results = [_partition_result(p["index"], ErrorCode.UNSUPPORTED_VERSION) for p in parts]
        elif acks not in (0, 1, -1):
            results = [_partition_result(p["index"], ErrorCode.INVALID_REQUIRED_ACKS) for p in parts]
        elif req.get("transactional_id") is not None:
            results = [
                _partition_result(
                    p["index"],
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactions are not supported",
                )
                for p in parts
            ]
        else:
            results = [_append(ctx, name, p, acks) for p in parts]
        responses.append({"name": name, "partition_responses": results})
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}
