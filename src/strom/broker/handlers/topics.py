"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21).

Each topic gets its own error code and message; one bad topic never fails the others. The rules
(legal names, counts, configs, replica assignments) live in `strom.broker.control.topic_admin` so that
auto-creation applies the same ones. Creation and deletion answer once this broker's metadata cache shows
the change (at once on a single node; after the controller's UpdateMetadata in a cluster), or at
`timeout_ms`.
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, Res, allowed, allowed_cluster, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResponseTopicResult,
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicResult,
    DeleteRecordsRequest,
    DeleteRecordsRequestPartition,
    DeleteRecordsResponse,
    DeleteRecordsResponsePartitionResult,
    DeleteRecordsResponseTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseDeletableTopicResult,
)


def _create_one(
    ctx: RequestContext, topic: CreateTopicsRequestCreatableTopic, validate_only: bool
) -> CreateTopicsResponseCreatableTopicResult:
    name = topic["name"]
    out: CreateTopicsResponseCreatableTopicResult = {"name": name, "error_code": 0, "error_message": None}
    configs = {c["name"]: c["value"] for c in topic.get("configs", []) if c["value"] is not None}
    assignment = {
        int(a["partition_index"]): [int(b) for b in a["broker_ids"]] for a in topic.get("assignments") or []
    }
    try:
        if not (allowed_cluster(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Res.TOPIC, name)):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ctx.ports.topics.create_topic(
            name,
            int(topic["num_partitions"]),
            int(topic["replication_factor"]),
            configs,
            validate_only,
            assignment or None,
        )
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
        out["error_message"] = exc.message
    return out


@handles(ApiKey.CREATE_TOPICS)
async def handle_create_topics(ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    validate_only = bool(req.get("validate_only", False))
    seen: set[str] = set()
    results: list[CreateTopicsResponseCreatableTopicResult] = []
    for topic in req["topics"]:
        if topic["name"] in seen:
            results.append(
                {
                    "name": topic["name"],
                    "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": "duplicate topic in request",
                }
            )
            continue
        seen.add(topic["name"])
        results.append(_create_one(ctx, topic, validate_only))
    if not validate_only:
        await _await_cluster(
            ctx, [r["name"] for r in results if not r["error_code"]], int(req.get("timeout_ms", 30_000))
        )
    return {"throttle_time_ms": 0, "topics": results}


async def _await_cluster(
    ctx: RequestContext, names: list[str], timeout_ms: int, deleted: bool = False
) -> None:
    """Answer once the controller's metadata reached this broker (or timeout_ms passed)."""
    for name in names:
        await ctx.ports.control.wait_for_topic(name, timeout_ms, deleted=deleted)


@handles(ApiKey.DELETE_TOPICS)
async def handle_delete_topics(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    results: list[DeleteTopicsResponseDeletableTopicResult] = []
    for name in req["topic_names"]:
        out: DeleteTopicsResponseDeletableTopicResult = {"name": name, "error_code": 0}
        try:
            if denied(ctx, Op.DELETE, Res.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            ctx.ports.topics.delete_topic(name)
        except KafkaError as exc:
            out["error_code"] = int(exc.code)  # (no error message before v5)
        results.append(out)
    await _await_cluster(
        ctx,
        [r["name"] for r in results if not r["error_code"]],
        int(req.get("timeout_ms", 30_000)),
        deleted=True,
    )
    return {"throttle_time_ms": 0, "responses": results}


@handles(ApiKey.CREATE_PARTITIONS)
async def handle_create_partitions(
    ctx: RequestContext, req: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    validate_only = bool(req.get("validate_only", False))
    results: list[CreatePartitionsResponseTopicResult] = []
    for topic in req["topics"]:
        out: CreatePartitionsResponseTopicResult = {
            "name": topic["name"],
            "error_code": 0,
            "error_message": None,
        }
        try:
            if denied(ctx, Op.ALTER, Res.TOPIC, topic["name"]):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            assignments = [[int(b) for b in a["broker_ids"]] for a in topic.get("assignments") or []]
            ctx.ports.topics.add_partitions(topic["name"], int(topic["count"]), validate_only, assignments)
            if not validate_only:
                await ctx.ports.control.wait_for_partitions(
                    topic["name"], int(topic["count"]), int(req.get("timeout_ms", 30_000))
                )
        except KafkaError as exc:
            out["error_code"] = int(exc.code)
            out["error_message"] = exc.message
        results.append(out)
    return {"throttle_time_ms": 0, "results": results}


def _delete_records(
    ctx: RequestContext, topic: str, p: DeleteRecordsRequestPartition
) -> DeleteRecordsResponsePartitionResult:
    index = int(p["partition_index"])
    out: DeleteRecordsResponsePartitionResult = {
        "partition_index": index,
        "low_watermark": -1,
        "error_code": 0,
    }
    try:
        if denied(ctx, Op.DELETE, Res.TOPIC, topic):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        # Kafka: -1 means "up to the high watermark"; above it, OFFSET_OUT_OF_RANGE
        out["low_watermark"] = ctx.ports.replica_manager.delete_records(topic, index, int(p["offset"]))
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
    return out


@handles(ApiKey.DELETE_RECORDS)
async def handle_delete_records(ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics: list[DeleteRecordsResponseTopicResult] = [
        {"name": t["name"], "partitions": [_delete_records(ctx, t["name"], p) for p in t["partitions"]]}
        for t in req["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}
