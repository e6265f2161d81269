"""The share coordinator's requests: ReadShareGroupState (84), WriteShareGroupState (85) and
DeleteShareGroupState (86).

Share-partition leaders and group coordinators on other brokers send them (share_persister.py); the
answer is per partition: the stored state (a start offset of -1 when none is stored) or the write's
or the deletion's error code (a DeleteShareGroupState without topics, Strom's own form, removes every
state of the group kept here and lists them), NOT_COORDINATOR
or COORDINATOR_LOAD_IN_PROGRESS while this broker is not (yet) the key's share coordinator, so the
leader retries. With ACLs they need CLUSTER_ACTION, as Kafka's do (only brokers send them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from strom.broker.coordinators.share_state_service import ShareStateService
from strom.broker.handlers.authz import Op, allowed_cluster
from strom.broker.handlers.base import RequestContext, handles
from strom.coordinator.share.state import (
    NO_START_OFFSET,
    ShareState,
    StateKey,
    batches_from_wire,
    batches_to_wire,
)
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.uuid_text import ZERO_UUID

P = TypeVar("P")  # a request's partition entry
R = TypeVar("R")  # its answer
# A write's or a deletion's partition entry: answered with an error code only.
Coded = TypeVar(
    "Coded", m.WriteShareGroupStateRequestPartitionData, m.DeleteShareGroupStateRequestPartitionData
)


def _service(ctx: RequestContext) -> ShareStateService:
    service = ctx.ports.share_state
    assert service is not None, "the broker builds its share coordinator"
    return service


def _read_result(
    partition: int, code: ErrorCode, state: ShareState | None
) -> m.ReadShareGroupStateResponsePartitionResult:
    return {
        "partition": partition,
        "error_code": int(code),
        "error_message": None,
        "state_epoch": 0 if state is None else state.state_epoch,
        "start_offset": NO_START_OFFSET if state is None else state.start_offset,
        "state_batches": [] if state is None else batches_to_wire(state.batches),
    }


async def _each_partition(
    ctx: RequestContext,
    topics: Iterable[tuple[bytes, Sequence[P]]],
    answer: Callable[[bytes, P], Awaitable[R]],
    refused: Callable[[P], R],
) -> list[tuple[bytes, list[R]]]:
    """Each topic's partitions answered in order: by ``answer`` (topic id, partition), or, without
    CLUSTER_ACTION on the cluster, by ``refused`` (CLUSTER_AUTHORIZATION_FAILED)."""
    allowed = allowed_cluster(ctx, Op.CLUSTER_ACTION)
    return [
        (topic_id, [await answer(topic_id, p) if allowed else refused(p) for p in partitions])
        for topic_id, partitions in topics
    ]


async def _each_coded(
    ctx: RequestContext,
    topics: Iterable[tuple[bytes, Sequence[Coded]]],
    apply: Callable[[bytes, Coded], Awaitable[ErrorCode]],
) -> list[m.WriteShareGroupStateResponseResult]:
    """A write's or a deletion's answer: ``apply``'s error code per partition."""

    def result(p: Coded, code: ErrorCode) -> m.WriteShareGroupStateResponsePartitionResult:
        return {"partition": int(p["partition"]), "error_code": int(code), "error_message": None}

    async def answer(topic_id: bytes, p: Coded) -> m.WriteShareGroupStateResponsePartitionResult:
        return result(p, await apply(topic_id, p))

    def refused(p: Coded) -> m.WriteShareGroupStateResponsePartitionResult:
        return result(p, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    answered = await _each_partition(ctx, topics, answer, refused)
    return [{"topic_id": topic_id, "partitions": parts} for topic_id, parts in answered]


@handles(ApiKey.READ_SHARE_GROUP_STATE)
async def handle_read_share_group_state(
    ctx: RequestContext, req: m.ReadShareGroupStateRequest
) -> m.ReadShareGroupStateResponse:
    service = _service(ctx)

    async def answer(
        topic_id: bytes, p: m.ReadShareGroupStateRequestPartitionData
    ) -> m.ReadShareGroupStateResponsePartitionResult:
        index = int(p["partition"])
        code, state = await service.read(StateKey(req["group_id"], topic_id, index), int(p["leader_epoch"]))
        return _read_result(index, code, state)

    def refused(p: m.ReadShareGroupStateRequestPartitionData) -> m.ReadShareGroupStateResponsePartitionResult:
        return _read_result(int(p["partition"]), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)

    topics = [(bytes(t["topic_id"]), t["partitions"]) for t in req["topics"]]
    answered = await _each_partition(ctx, topics, answer, refused)
    return {"results": [{"topic_id": topic_id, "partitions": parts} for topic_id, parts in answered]}


@handles(ApiKey.WRITE_SHARE_GROUP_STATE)
async def handle_write_share_group_state(
    ctx: RequestContext, req: m.WriteShareGroupStateRequest
) -> m.WriteShareGroupStateResponse:
    service = _service(ctx)
    group_id = req["group_id"]

    async def write(topic_id: bytes, p: m.WriteShareGroupStateRequestPartitionData) -> ErrorCode:
        return await _write(service, group_id, topic_id, p)

    topics = [(bytes(t["topic_id"]), t["partitions"]) for t in req["topics"]]
    return {"results": await _each_coded(ctx, topics, write)}


async def _write(
    service: ShareStateService, group_id: str, topic_id: bytes, p: m.WriteShareGroupStateRequestPartitionData
) -> ErrorCode:
    try:
        batches = batches_from_wire(p["state_batches"])
    except ValueError:
        return ErrorCode.INVALID_REQUEST
    state = ShareState(int(p["state_epoch"]), int(p["leader_epoch"]), int(p["start_offset"]), batches)
    return await service.write(StateKey(group_id, topic_id, int(p["partition"])), state)


@handles(ApiKey.DELETE_SHARE_GROUP_STATE)
async def handle_delete_share_group_state(
    ctx: RequestContext, req: m.DeleteShareGroupStateRequest
) -> m.DeleteShareGroupStateResponse:
    service = _service(ctx)
    group_id = req["group_id"]
    if not req["topics"] and allowed_cluster(ctx, Op.CLUSTER_ACTION):
        return await _delete_group(service, group_id)

    async def delete(topic_id: bytes, p: m.DeleteShareGroupStateRequestPartitionData) -> ErrorCode:
        return await service.delete(StateKey(group_id, topic_id, int(p["partition"])))

    topics = [(bytes(t["topic_id"]), t["partitions"]) for t in req["topics"]]
    return {"results": await _each_coded(ctx, topics, delete)}


async def _delete_group(service: ShareStateService, group_id: str) -> m.DeleteShareGroupStateResponse:
    """No topics (Strom's form, for DeleteGroups): every state of the group kept here goes; the answer
    lists the share-partitions removed, and a refusal as one partition -1 of the zero topic id."""
    code, keys = await service.delete_group(group_id)
    by_topic: dict[bytes, list[m.DeleteShareGroupStateResponsePartitionResult]] = {}
    for key in keys:
        by_topic.setdefault(key.topic_id, []).append(
            {"partition": key.partition, "error_code": 0, "error_message": None}
        )
    if code is not ErrorCode.NONE:
        by_topic.setdefault(ZERO_UUID, []).append(
            {"partition": -1, "error_code": int(code), "error_message": None}
        )
    return {"results": [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()]}
