"""AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), KIP-932: an admin moves or forgets where
a share group stands, at the group's coordinator.

Only a share group without members may be changed (NON_EMPTY_GROUP otherwise, for the whole request),
as in Kafka: its consumers would otherwise be handed records on the old terms. The check and a hold
that keeps members from joining until the change is done are one operation of the coordinator
(`share_group_service.held_empty`): a join meanwhile answers COORDINATOR_NOT_AVAILABLE and is
retried. An id that a classic or consumer group holds answers GROUP_ID_NOT_FOUND (it is not a share
group); a group the coordinator has no members of is empty: one kept Empty after its last member left,
or one it never had.
Authorization as Kafka's: READ (alter) or DELETE (delete) on the group, READ on each topic
(TOPIC_AUTHORIZATION_FAILED otherwise: per partition for an alter, per topic for a delete).

* Alter: per partition, the stored share-partition state is replaced, through the share persister
  (wherever the partition's share coordinator is), by the new start offset with nothing in flight and
  the state epoch bumped. The stored state is read first, at the partition's current leader epoch,
  for its epochs.
* Delete: the stored state of every partition of each topic is removed (DeleteShareGroupState to a
  remote share coordinator); the group starts those partitions over at ``share.auto.offset.reset``.
  The answer has one error per topic, Kafka 4.1's layout (the topic's refusal, else the first of its
  partitions that failed). The topics deleted are then dropped from the share-partitions the group
  initialized (`share_group_service.forget_topics`), so an empty group's offsets no longer name them.

A partition's leader that still holds the share-partition in memory reads the stored state again at
its next use once the group has no share session left there (the group is empty, so its consumers
closed their sessions or the sessions are evicted when idle), and a write of its old state is refused
with FENCED_STATE_EPOCH after an alter (strom.broker.replication.share_partitions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from strom.broker.coordinators import share_group_service
from strom.broker.handlers.authz import Op, Res, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.groups import group_refusal, group_service
from strom.coordinator.share.state import SharePersister, ShareState
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.uuid_text import ZERO_UUID

FIRST_STATE_EPOCH = 1  # an alter of a share-partition no leader has stored yet


def _persister(ctx: RequestContext) -> SharePersister:
    persister = ctx.ports.share_persister
    assert persister is not None, "the broker builds its share persister"
    return persister


def _topic_refusal(ctx: RequestContext, name: str) -> ErrorCode | None:
    if name not in ctx.ports.metadata.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if denied(ctx, Op.READ, Res.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return None


def _topic_id(ctx: RequestContext, name: str) -> bytes:
    info = ctx.ports.metadata.topics.get(name)
    return ZERO_UUID if info is None else info.topic_id


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
async def handle_alter_share_group_offsets(
    ctx: RequestContext, req: m.AlterShareGroupOffsetsRequest
) -> m.AlterShareGroupOffsetsResponse:
    group_id = req["group_id"]
    offsets = {
        (t["topic_name"], int(p["partition_index"])): int(p["start_offset"])
        for t in req["topics"]
        for p in t["partitions"]
    }

    async def alter(topic: str, index: int) -> ErrorCode:
        return await _alter(ctx, group_id, topic, index, offsets[(topic, index)])

    asked = [(t["topic_name"], [int(p["partition_index"]) for p in t["partitions"]]) for t in req["topics"]]
    return await _answer(ctx, group_id, Op.READ, asked, alter)


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
async def handle_delete_share_group_offsets(
    ctx: RequestContext, req: m.DeleteShareGroupOffsetsRequest
) -> m.DeleteShareGroupOffsetsResponse:
    group_id = req["group_id"]
    refused = group_refusal(ctx, group_id, Op.DELETE)
    if refused is not None:
        return _refused_whole(refused)
    async with share_group_service.held_empty(group_service(ctx), group_id) as held:
        if held is not ErrorCode.NONE:
            return _refused_whole(held)
        if share_group_service.share_group(group_service(ctx), group_id) is None:
            # no such share group (empty ones are kept), as Kafka answers
            return _refused_whole(ErrorCode.GROUP_ID_NOT_FOUND)
        return await _delete_offsets(ctx, group_id, req["topics"])


def _refused_whole(code: ErrorCode) -> m.DeleteShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": None, "responses": []}


async def _delete_offsets(
    ctx: RequestContext, group_id: str, topics: list[m.DeleteShareGroupOffsetsRequestTopic]
) -> m.DeleteShareGroupOffsetsResponse:
    """The deletion itself, while the group is held empty."""
    persister = _persister(ctx)
    responses: list[m.DeleteShareGroupOffsetsResponseTopic] = []
    for topic in topics:
        name = topic["topic_name"]
        code = _topic_refusal(ctx, name)
        if code is None:
            # One answer per topic (Kafka 4.1's layout): its first partition that failed, if any.
            codes = [await persister.delete(group_id, name, i) for i in range(_partitions(ctx, name))]
            code = next((c for c in codes if c is not ErrorCode.NONE), ErrorCode.NONE)
        answer: m.DeleteShareGroupOffsetsResponseTopic = {
            "topic_name": name,
            "topic_id": _topic_id(ctx, name),
            "error_code": int(code),
            "error_message": None,
        }
        responses.append(answer)
    forgotten = [r["topic_name"] for r in responses if r["error_code"] == ErrorCode.NONE]
    if forgotten:
        # The group no longer counts them among the share-partitions it initialized (a failure here
        # is the coordinator's: the whole request answers it, and the client retries).
        code = await share_group_service.forget_topics(group_service(ctx), group_id, forgotten)
        if code is not ErrorCode.NONE:
            return _refused_whole(code)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


def _partitions(ctx: RequestContext, name: str) -> int:
    info = ctx.ports.metadata.topics.get(name)
    return 0 if info is None else info.partitions


async def _answer(
    ctx: RequestContext,
    group_id: str,
    operation: Op,
    asked: list[tuple[str, list[int]]],
    apply: Callable[[str, int], Awaitable[ErrorCode]],
) -> m.AlterShareGroupOffsetsResponse:
    """The answer of an alter: the group's refusal, else ``apply`` per partition asked for (the topic's
    refusal for each of its partitions)."""
    refused = group_refusal(ctx, group_id, operation)
    if refused is not None:
        return {"throttle_time_ms": 0, "error_code": int(refused), "error_message": None, "responses": []}
    async with share_group_service.held_empty(group_service(ctx), group_id) as held:
        if held is not ErrorCode.NONE:
            return {"throttle_time_ms": 0, "error_code": int(held), "error_message": None, "responses": []}
        responses: list[m.AlterShareGroupOffsetsResponseTopic] = []
        for name, indexes in asked:
            topic_refused = _topic_refusal(ctx, name)
            parts: list[m.AlterShareGroupOffsetsResponsePartition] = []
            for index in indexes:
                code = topic_refused or await apply(name, index)
                parts.append({"partition_index": index, "error_code": int(code), "error_message": None})
            responses.append({"topic_name": name, "topic_id": _topic_id(ctx, name), "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


async def _alter(ctx: RequestContext, group_id: str, topic: str, index: int, start_offset: int) -> ErrorCode:
    meta = ctx.ports.metadata.partitions.get((topic, index))
    if meta is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if start_offset < 0:
        return ErrorCode.INVALID_REQUEST
    persister = _persister(ctx)
    try:
        stored = await persister.read(group_id, topic, index, meta.leader_epoch)
    except KafkaError as exc:
        return exc.code
    if stored is None:
        state = ShareState(FIRST_STATE_EPOCH, meta.leader_epoch, start_offset)
    else:
        state = ShareState(stored.state_epoch + 1, stored.leader_epoch, start_offset)
    return await persister.write(group_id, topic, index, state)
