"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete.

The handlers translate versions; the rules (who may commit, standalone generation -1 commits,
metadata size, persistence before acknowledgement) are the coordinator's (`strom.coordinator.coordinator`).
In cluster mode a commit is answered only once the ISR of the group's `__consumer_offsets` partition has
it (`GroupService.wait_for_replication`, the acks=all purgatory wait).
Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION, as Kafka does.

Version notes (docs/protocol.md#error-placement and #leader-epochs): OffsetFetch v1 has no top-level error
code, so a group-level error is repeated in every partition; v2+ carries it at the top and lets `topics` be
null ("every committed offset of the group"). A partition without a committed offset answers offset -1 and
empty metadata; v5 adds the committed leader epoch, -1 when unknown (never Kafka's int32 minimum). v6 is v5 in
the flexible encoding; v7 adds ``require_stable`` (KIP-447): a partition whose transactional offsets await
their transaction's marker answers UNSTABLE_OFFSET_COMMIT (retriable) with offset -1 instead of the
committed offset, so a consumer starting after a crash does not read past a pending commit.
v8 (KIP-709) asks for several groups at once and answers each with its own error code (authorization,
NOT_COORDINATOR: groups of one request may be coordinated elsewhere); ``require_stable`` stays
request-wide. v9 (KIP-848) adds each group's member id and member epoch: for a consumer group a named
member must exist and be at that epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH), while a request without
them (null member id, epoch -1: admin tools) and any request for a classic group is answered as before.
An id that a share group holds has no committed offsets: all three answer GROUP_ID_NOT_FOUND for it, as
Kafka does (`strom.coordinator.group_types.offsets_refusal`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import cast

from strom.broker.coordinators import share_group_service
from strom.broker.handlers.authz import Op, Res, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.groups import group_refusal, group_service
from strom.coordinator import OffsetAndMetadata, TopicPartition
from strom.coordinator.consumer.model import fetch_error
from strom.coordinator.group_types import offsets_refusal
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)

NO_OFFSET = -1
NO_LEADER_EPOCH = -1
NO_MEMBER_EPOCH = -1
GROUPS_VERSION = 8  # OffsetFetch v8 (KIP-709): several groups per request, errors per group


def _refusal(ctx: RequestContext, group_id: str, operation: Op) -> ErrorCode | None:
    """The group-level refusal: authorization and coordination, then a share group holding the id."""
    refused = group_refusal(ctx, group_id, operation)
    if refused is not None:
        return refused
    holder = share_group_service.group_type(group_service(ctx), group_id)
    not_offsets = offsets_refusal(group_id, holder)
    return None if not_offsets is None else not_offsets.error


def _partition_exists(ctx: RequestContext, tp: TopicPartition) -> bool:
    info = ctx.ports.metadata.topics.get(tp.topic)
    return info is not None and 0 <= tp.partition < info.partitions


# --- OffsetCommit --------------------------------------------------------------------------------


@handles(ApiKey.OFFSET_COMMIT)
async def handle_offset_commit(ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    group_id = req["group_id"]
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    results: dict[TopicPartition, ErrorCode] = {}
    order: list[TopicPartition] = []
    for topic in req["topics"]:
        for part in topic["partitions"]:
            tp = TopicPartition(topic["name"], int(part["partition_index"]))
            order.append(tp)
            if denied(ctx, Op.READ, Res.TOPIC, tp.topic):
                results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not _partition_exists(ctx, tp):
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=int(part["committed_offset"]),
                leader_epoch=int(part.get("committed_leader_epoch", NO_LEADER_EPOCH)),
                metadata=part.get("committed_metadata") or "",
            )
    error = _refusal(ctx, group_id, Op.READ)
    service = group_service(ctx)
    if error is not None:
        results.update(dict.fromkeys(offsets, error))
    elif offsets:
        service.ensure_offsets_topic()
        committed = service.coordinator.commit_offsets(
            group_id,
            int(req.get("generation_id_or_member_epoch", -1)),
            req.get("member_id") or "",
            req.get("group_instance_id") if ctx.api_version >= 7 else None,
            offsets,
        )
        if any(code is ErrorCode.NONE for code in committed.values()):
            # Cluster mode: answer once the ISR has the commit (acks=-1), as Kafka's coordinator does.
            replicated = await service.wait_for_replication(group_id)
            if replicated is not ErrorCode.NONE:
                committed = {
                    tp: replicated if code is ErrorCode.NONE else code for tp, code in committed.items()
                }
        results.update(committed)
    by_topic: dict[str, list[OffsetCommitResponsePartition]] = defaultdict(list)
    for tp in order:
        by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": int(results[tp])})
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


# --- OffsetFetch ---------------------------------------------------------------------------------


@handles(ApiKey.OFFSET_FETCH)
async def handle_offset_fetch(ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    version = ctx.api_version
    require_stable = bool(req.get("require_stable"))
    if version >= GROUPS_VERSION:
        groups: list[OffsetFetchResponseGroup] = []
        for group in req.get("groups", []):
            code, topics = _fetch_group(
                ctx,
                group["group_id"],
                _requested(group["topics"]),
                require_stable,
                group.get("member_id"),
                int(group.get("member_epoch", NO_MEMBER_EPOCH)),
            )
            # The v8 partition is the v1-7 one with its leader epoch always present, which it is here.
            groups.append(
                {
                    "group_id": group["group_id"],
                    "topics": cast(list[OffsetFetchResponseTopics], topics),
                    "error_code": int(code),
                }
            )
        return {"throttle_time_ms": 0, "groups": groups}
    requested = _requested(req.get("topics"))
    code, topics = _fetch_group(
        ctx, req.get("group_id", ""), requested, require_stable, None, NO_MEMBER_EPOCH
    )
    if code is not ErrorCode.NONE and version < 2:
        # v1 has nowhere else to put it (docs/protocol.md#error-placement).
        return {"topics": _fetch_topics(dict.fromkeys(requested or []), code)}
    return {"throttle_time_ms": 0, "topics": topics, "error_code": int(code)}


def _requested(
    topics: list[OffsetFetchRequestTopic] | list[OffsetFetchRequestTopics] | None,
) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return [TopicPartition(t["name"], int(p)) for t in topics for p in t["partition_indexes"]]


def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    requested: list[TopicPartition] | None,
    require_stable: bool,
    member_id: str | None,
    member_epoch: int,
) -> tuple[ErrorCode, list[OffsetFetchResponseTopic]]:
    """One group's answer: a group-level error (and no topics), or its committed offsets."""
    error = _refusal(ctx, group_id, Op.DESCRIBE)
    if error is not None:
        return error, []
    service = group_service(ctx)
    # v9 (KIP-848): a consumer group's member must name its current epoch.
    error = fetch_error(service.consumer_group(group_id), member_id, member_epoch)
    if error is not ErrorCode.NONE:
        return error, []
    refused: dict[TopicPartition, OffsetAndMetadata | None] = {}
    # Kafka: named partitions of topics the sender may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED;
    # for "all topics" they are left out.
    if ctx.ports.authorizer is not None and requested is not None:
        refused = dict.fromkeys(tp for tp in requested if denied(ctx, Op.DESCRIBE, Res.TOPIC, tp.topic))
        requested = [tp for tp in requested if tp not in refused]
    committed = service.coordinator.fetch_offsets(group_id, requested)
    if ctx.ports.authorizer is not None:
        committed = {
            tp: om for tp, om in committed.items() if not denied(ctx, Op.DESCRIBE, Res.TOPIC, tp.topic)
        }
    # All topics (null) lists the committed partitions only, as Kafka does, pending ones among them unstable.
    unstable = service.unstable_partitions(group_id) if require_stable else set()
    return ErrorCode.NONE, _fetch_topics(committed, ErrorCode.NONE, unstable) + _fetch_topics(
        refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )


def _fetch_topics(
    committed: dict[TopicPartition, OffsetAndMetadata | None],
    code: ErrorCode,
    unstable: set[TopicPartition] | None = None,
) -> list[OffsetFetchResponseTopic]:
    by_topic: dict[str, list[OffsetFetchResponsePartition]] = defaultdict(list)
    for tp, found in committed.items():
        is_unstable = unstable is not None and tp in unstable
        om = None if is_unstable else found
        partition_code = ErrorCode.UNSTABLE_OFFSET_COMMIT if is_unstable else code
        by_topic[tp.topic].append(
            {
                "partition_index": tp.partition,
                "committed_offset": om.offset if om is not None else NO_OFFSET,
                "committed_leader_epoch": om.leader_epoch if om is not None else NO_LEADER_EPOCH,
                "metadata": om.metadata if om is not None else "",
                "error_code": int(partition_code),
            }
        )
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


# --- OffsetDelete --------------------------------------------------------------------------------


@handles(ApiKey.OFFSET_DELETE)
async def handle_offset_delete(ctx: RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    group_id = req["group_id"]
    requested = [
        TopicPartition(t["name"], int(p["partition_index"])) for t in req["topics"] for p in t["partitions"]
    ]
    error = _refusal(ctx, group_id, Op.DELETE)
    service = group_service(ctx)
    if error is not None:
        return {
            "error_code": int(error),
            "throttle_time_ms": 0,
            "topics": [],
        }
    refused = {tp for tp in requested if denied(ctx, Op.READ, Res.TOPIC, tp.topic)}
    known = [tp for tp in requested if tp not in refused and _partition_exists(ctx, tp)]
    top, results = service.coordinator.delete_offsets(group_id, known)
    if top is not ErrorCode.NONE:
        return {"error_code": int(top), "throttle_time_ms": 0, "topics": []}
    by_topic: dict[str, list[OffsetDeleteResponsePartition]] = defaultdict(list)
    for tp in requested:
        code = results.get(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if tp in refused:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": int(code)})
    return {
        "error_code": 0,
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
