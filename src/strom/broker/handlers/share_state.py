"""The share coordinator's requests: ReadShareGroupState (84), WriteShareGroupState (85).

Share-partition leaders on other brokers send them (share_persister.py); the answer is per partition:
the stored state (a start offset of -1 when none is stored) or the write's error code, NOT_COORDINATOR
or COORDINATOR_LOAD_IN_PROGRESS while this broker is not (yet) the key's share coordinator, so the
leader retries. With ACLs they need CLUSTER_ACTION, as Kafka's do (only brokers send them).
"""

from __future__ import annotations

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


@handles(ApiKey.READ_SHARE_GROUP_STATE)
async def handle_read_share_group_state(
    ctx: RequestContext, req: m.ReadShareGroupStateRequest
) -> m.ReadShareGroupStateResponse:
    denied = not allowed_cluster(ctx, Op.CLUSTER_ACTION)
    service = _service(ctx)
    results: list[m.ReadShareGroupStateResponseResult] = []
    for topic in req["topics"]:
        parts: list[m.ReadShareGroupStateResponsePartitionResult] = []
        for p in topic["partitions"]:
            index = int(p["partition"])
            if denied:
                parts.append(_read_result(index, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None))
                continue
            key = StateKey(req["group_id"], bytes(topic["topic_id"]), index)
            code, state = await service.read(key, int(p["leader_epoch"]))
            parts.append(_read_result(index, code, state))
        results.append({"topic_id": topic["topic_id"], "partitions": parts})
    return {"results": results}


@handles(ApiKey.WRITE_SHARE_GROUP_STATE)
async def handle_write_share_group_state(
    ctx: RequestContext, req: m.WriteShareGroupStateRequest
) -> m.WriteShareGroupStateResponse:
    denied = not allowed_cluster(ctx, Op.CLUSTER_ACTION)
    service = _service(ctx)
    results: list[m.WriteShareGroupStateResponseResult] = []
    for topic in req["topics"]:
        parts: list[m.WriteShareGroupStateResponsePartitionResult] = []
        for p in topic["partitions"]:
            index = int(p["partition"])
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            if not denied:
                code = await _write(service, req["group_id"], bytes(topic["topic_id"]), p)
            parts.append({"partition": index, "error_code": int(code), "error_message": None})
        results.append({"topic_id": topic["topic_id"], "partitions": parts})
    return {"results": results}


async def _write(
    service: ShareStateService, group_id: str, topic_id: bytes, p: m.WriteShareGroupStateRequestPartitionData
) -> ErrorCode:
    try:
        batches = batches_from_wire(p["state_batches"])
    except ValueError:
        return ErrorCode.INVALID_REQUEST
    state = ShareState(int(p["state_epoch"]), int(p["leader_epoch"]), int(p["start_offset"]), batches)
    return await service.write(StateKey(group_id, topic_id, int(p["partition"])), state)
