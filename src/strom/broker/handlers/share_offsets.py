"""DescribeShareGroupOffsets (90, KIP-932): a share group's start offsets, at the group's coordinator.

Per group: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), and NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS as for the other group requests. Per topic-partition asked for (``Topics``
null: every partition of the topics the group's members subscribe to, and the share-partitions the group
initialized, kept while it is empty too) the share-partition start
offset as the share coordinator stores it (read through the share persister, wherever that
coordinator is, every partition at once): -1 when no state is stored (the group never read the
partition), with the partition's current leader epoch; or a partition error (UNKNOWN_TOPIC_OR_PARTITION,
TOPIC_AUTHORIZATION_FAILED without DESCRIBE on the topic, the share coordinator's error). Version 1
adds the lag: the records from the start offset to the high watermark not yet acknowledged or
archived (`strom.coordinator.share.state.lag`), where this broker hosts a replica of the partition
(its high watermark); -1 elsewhere and when no state is stored. The request does not wait for a
share coordinator: before `__share_group_state` exists its creation is asked for (as FindCoordinator
does for the other coordinators' topics) and the partitions answer COORDINATOR_NOT_AVAILABLE, as they
do while a share coordinator moves or loads; the client retries.
"""

from __future__ import annotations

import asyncio

from strom.broker.coordinators import share_group_service
from strom.broker.handlers.authz import Op, Res, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.groups import group_refusal, group_service
from strom.coordinator.share.state import NO_START_OFFSET, SharePersister, lag
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.uuid_text import ZERO_UUID


def _partition(
    index: int, code: ErrorCode, start_offset: int = NO_START_OFFSET, leader_epoch: int = -1, lag: int = -1
) -> m.DescribeShareGroupOffsetsResponsePartition:
    return {
        "partition_index": index,
        "start_offset": start_offset,
        "leader_epoch": leader_epoch,
        "lag": lag,
        "error_code": int(code),
        "error_message": None,
    }


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
async def handle_describe_share_group_offsets(
    ctx: RequestContext, req: m.DescribeShareGroupOffsetsRequest
) -> m.DescribeShareGroupOffsetsResponse:
    persister = ctx.ports.share_persister
    assert persister is not None, "the broker builds its share persister"
    groups: list[m.DescribeShareGroupOffsetsResponseGroup] = []
    for group in req["groups"]:
        group_id = group["group_id"]
        refused = group_refusal(ctx, group_id, Op.DESCRIBE)
        if refused is not None:
            groups.append(
                {"group_id": group_id, "topics": [], "error_code": int(refused), "error_message": None}
            )
            continue
        topics = [await _topic(ctx, persister, group_id, name, parts) for name, parts in _asked(ctx, group)]
        groups.append({"group_id": group_id, "topics": topics, "error_code": 0, "error_message": None})
    return {"throttle_time_ms": 0, "groups": groups}


def _asked(
    ctx: RequestContext, group: m.DescribeShareGroupOffsetsRequestGroup
) -> list[tuple[str, list[int]]]:
    """(topic, partitions) to describe: those asked for, or every partition of the subscribed topics
    and the share-partitions the group initialized (all an empty group has), of topics that exist."""
    wanted = group["topics"]
    if wanted is not None:
        return [(t["topic_name"], [int(p) for p in t["partitions"]]) for t in wanted]
    known = share_group_service.share_group(group_service(ctx), group["group_id"])
    if known is None:
        return []
    topics = ctx.ports.metadata.topics
    asked = {
        name: set(range(topics[name].partitions)) for name in known.subscribed_topics() if name in topics
    }
    for name, partitions in known.initialized.items():
        if name in topics:
            asked.setdefault(name, set()).update(p for p in partitions if p < topics[name].partitions)
    return [(name, sorted(asked[name])) for name in sorted(asked)]


async def _topic(
    ctx: RequestContext, persister: SharePersister, group_id: str, name: str, indexes: list[int]
) -> m.DescribeShareGroupOffsetsResponseTopic:
    info = ctx.ports.metadata.topics.get(name)
    if info is None or denied(ctx, Op.DESCRIBE, Res.TOPIC, name):
        refused = (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        topic_id = ZERO_UUID if info is None else info.topic_id
        return {
            "topic_name": name,
            "topic_id": topic_id,
            "partitions": [_partition(i, refused) for i in indexes],
        }
    now = ctx.ports.clock.monotonic_ms()

    async def one(index: int) -> m.DescribeShareGroupOffsetsResponsePartition:
        meta = ctx.ports.metadata.partitions.get((name, index))
        if meta is None:
            return _partition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            # One attempt (deadline now): the client retries what is not there yet.
            state = await persister.read(group_id, name, index, meta.leader_epoch, now)
        except KafkaError as exc:
            return _partition(index, exc.code)
        if state is None:
            return _partition(index, ErrorCode.NONE, NO_START_OFFSET, meta.leader_epoch)
        replica = ctx.ports.replica_manager.partitions.get((name, index))
        behind = -1 if replica is None else lag(state, replica.high_watermark)
        return _partition(index, ErrorCode.NONE, state.start_offset, meta.leader_epoch, behind)

    partitions = list(await asyncio.gather(*(one(index) for index in indexes)))
    return {"topic_name": name, "topic_id": info.topic_id, "partitions": partitions}
