"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21).

Each topic gets its own error code and message; one bad topic never fails the others. Topic ids
(KIP-516): CreateTopics v7 answers the new topic's id, and DeleteTopics v6 takes a topic by name or by
id (UNKNOWN_TOPIC_ID for an id no topic has); CreateTopics v5+ also answers the partition count,
replication factor and configs the topic got (KIP-525). Under a ``controller_mutation_rate`` quota
(KIP-599) each topic is admitted by the request's `MutationQuota` once it passed its own checks and
before it is changed: from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3 a topic arriving while
the client is over its quota is refused with THROTTLING_QUOTA_EXCEEDED (`_admit`). The rules
(legal names, counts, configs, replica assignments) live in `strom.broker.control.topic_admin` so that
auto-creation applies the same ones. Creation and deletion answer once this broker's metadata cache shows
the change (at once on a single node; after the controller's UpdateMetadata in a cluster), or at
`timeout_ms`.
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, Res, allowed, allowed_cluster, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.configs import topic_config_entries
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
from strom.protocol.uuid_text import ZERO_UUID

_THROTTLED = "The throttling quota has been exceeded."  # Kafka's message for THROTTLING_QUOTA_EXCEEDED


def _admit(ctx: RequestContext, partitions: int) -> None:
    """Count a topic's created or deleted partitions against the mutation quota; raises when refused."""
    quota = ctx.mutation_quota
    if quota is not None and not quota.admit(partitions):
        raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, _THROTTLED)


def _create_one(
    ctx: RequestContext, topic: CreateTopicsRequestCreatableTopic, validate_only: bool
) -> CreateTopicsResponseCreatableTopicResult:
    name = topic["name"]
    out: CreateTopicsResponseCreatableTopicResult = {
        "name": name,
        "error_code": 0,
        "error_message": None,
        "topic_id": ZERO_UUID,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
    configs = {c["name"]: c["value"] for c in topic.get("configs", []) if c["value"] is not None}
    assignment = {
        int(a["partition_index"]): [int(b) for b in a["broker_ids"]] for a in topic.get("assignments") or []
    }
    partitions, replication_factor = int(topic["num_partitions"]), int(topic["replication_factor"])
    try:
        if not (allowed_cluster(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Res.TOPIC, name)):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        topics, asked = ctx.ports.topics, assignment or None
        if ctx.mutation_quota is not None and not validate_only:
            # Kafka validates a topic before it counts against the quota: a refused one costs nothing.
            topics.create_topic(name, partitions, replication_factor, configs, True, asked)
            _admit(ctx, topics.resolved_counts(partitions, replication_factor, asked)[0])
        created = topics.create_topic(name, partitions, replication_factor, configs, validate_only, asked)
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
        out["error_message"] = exc.message
        return out
    # v5+ (KIP-525): what was created, with its configs; v7: its topic id (KIP-516)
    if created is not None:
        out["topic_id"] = created.topic_id
    out["num_partitions"], out["replication_factor"] = ctx.ports.topics.resolved_counts(
        partitions, replication_factor, assignment or None
    )
    if denied(ctx, Op.DESCRIBE_CONFIGS, Res.TOPIC, name):
        out["topic_config_error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    else:
        out["configs"] = [
            {
                "name": entry["name"],
                "value": entry["value"],
                "read_only": entry["read_only"],
                "config_source": entry["config_source"],
                "is_sensitive": entry["is_sensitive"],
            }
            for entry in topic_config_entries(ctx.ports, configs)
        ]
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


def _delete_one(
    ctx: RequestContext, name: str | None, topic_id: bytes
) -> DeleteTopicsResponseDeletableTopicResult:
    """One topic named by name (v0-5) or, from v6, by name or topic id (KIP-516; not both)."""
    out: DeleteTopicsResponseDeletableTopicResult = {
        "name": name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
    }
    try:
        if name is not None and topic_id != ZERO_UUID:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "a topic name and a topic id were both given")
        if name is None:
            out["name"] = name = ctx.ports.metadata.topic_name(topic_id)
            if name is None or denied(ctx, Op.DESCRIBE, Res.TOPIC, name):
                out["name"] = None
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
        elif (info := ctx.ports.metadata.topics.get(name)) is not None:
            out["topic_id"] = info.topic_id
        if denied(ctx, Op.DELETE, Res.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if ctx.mutation_quota is not None and (info := ctx.ports.metadata.topics.get(name)) is not None:
            _admit(ctx, info.partitions)
        ctx.ports.topics.delete_topic(name)
    except KafkaError as exc:
        out["error_code"], out["error_message"] = int(exc.code), exc.message
    return out


@handles(ApiKey.DELETE_TOPICS)
async def handle_delete_topics(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    named: list[tuple[str | None, bytes]] = [(name, ZERO_UUID) for name in req.get("topic_names", ())]
    named += [(t["name"], bytes(t["topic_id"])) for t in req.get("topics", ())]
    results = [_delete_one(ctx, name, topic_id) for name, topic_id in named]
    await _await_cluster(
        ctx,
        [name for r in results if not r["error_code"] and (name := r["name"]) is not None],
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
            if ctx.mutation_quota is not None and not validate_only:
                ctx.ports.topics.add_partitions(topic["name"], int(topic["count"]), True, assignments)
                info = ctx.ports.metadata.topics.get(topic["name"])
                _admit(ctx, int(topic["count"]) - (info.partitions if info is not None else 0))
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
        rm = ctx.ports.replica_manager
        out["low_watermark"] = rm.delete_records(topic, index, int(p["offset"]))
        if (rlm := ctx.ports.remote_log_manager) is not None and (part := rm.partitions.get((topic, index))):
            # Tiered storage: the log may still start in remote storage (the remote log manager deletes
            # the remote segments wholly below the offset on its next round).
            remote_start = rlm.log_start(part)
            if remote_start is not None:
                out["low_watermark"] = remote_start[0]
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
    except OSError:  # the disk refused the delete (the log reported it: a JBOD dir goes offline)
        out["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
    return out


@handles(ApiKey.DELETE_RECORDS)
async def handle_delete_records(ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics: list[DeleteRecordsResponseTopicResult] = [
        {"name": t["name"], "partitions": [_delete_records(ctx, t["name"], p) for p in t["partitions"]]}
        for t in req["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}
