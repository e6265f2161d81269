"""KIP-932 share consumers' reads: ShareFetch (78) and ShareAcknowledge (79), at the partitions' leader.

Rules (docs/share-groups.md):
- the request's share session (`SharePartitionManager.session`) is checked first: a bad epoch or an
  unknown session fails the whole request (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND), and
  so does a new session when the leader's cache is full (SHARE_SESSION_LIMIT_REACHED); idle sessions
  are evicted first (their records released);
- acknowledgements (piggy-backed on ShareFetch, or ShareAcknowledge's own) are applied before any
  acquisition, per partition, and answered in the partition's AcknowledgeErrorCode (ShareFetch) or
  ErrorCode (ShareAcknowledge) once written to the share coordinator (a failed write: the write's
  error, the records as they were before);
- the share coordinators are waited for within the request's own time: a ShareFetch's ``MaxWaitMs``,
  a ShareAcknowledge's `ACKNOWLEDGE_TIMEOUT_MS` (it has no timeout field). The partitions' writes and
  first loads run at once, so one slow share coordinator holds the others' answers no longer than that
  (an attempt under way finishes: a write may have landed);
- epoch -1 closes the session after its acknowledgements: what the member still holds on the
  session's partitions is released at once (no fetch is done);
- a ShareFetch then acquires records on the session's partitions, in order, until ``MaxRecords`` (about:
  whole batches) or ``MaxBytes``; with nothing to acquire it parks until a partition's high watermark
  moves or records are released (the purgatory), at most ``MaxWaitMs``;
- the response lists the partitions that have records, an error, or acknowledgements to answer;
- topics are named by id (UNKNOWN_TOPIC_ID for an unknown one); with ACLs, READ on the group (else the
  whole request fails with GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED);
  a partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER with its leader (KIP-951's
  CurrentLeader and NodeEndpoints, as Fetch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from strom.broker.handlers.authz import Op, Res, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.topic_ids import LEADER_MOVED, leader_hint, node_endpoints
from strom.broker.replication.share_partitions import (
    CLOSE_EPOCH,
    OPEN_EPOCH,
    AcquireResult,
    SharePartitionManager,
    ShareSession,
)
from strom.coordinator.share.partition import AcknowledgeType
from strom.protocol import messages as m
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

DEFAULT_MAX_RECORDS = 500
# ShareAcknowledge carries no timeout of its own: its writes wait for a moving share coordinator as
# long as the share coordinator's own write waits for its ISR.
ACKNOWLEDGE_TIMEOUT_MS = 5_000
NO_LEADER: m.ShareFetchResponseLeaderIdAndEpoch = {"leader_id": -1, "leader_epoch": -1}

TopicPartition = tuple[str, int]


def release_key(group_id: str, topic: str, index: int) -> tuple[str, str, str, int]:
    """The purgatory key a parked ShareFetch of the group also waits on: records released there."""
    return ("share-release", group_id, topic, index)


def _batches(raw: Sequence[m.ShareFetchRequestAcknowledgementBatch]) -> list[tuple[int, int, list[int]]]:
    return [
        (int(b["first_offset"]), int(b["last_offset"]), [int(t) for t in b["acknowledge_types"]]) for b in raw
    ]


def _releases(batches: list[tuple[int, int, list[int]]]) -> bool:
    return any(AcknowledgeType.RELEASE in types for _, _, types in batches)


def _resolve(ctx: RequestContext, topic_id: bytes) -> tuple[str | None, ErrorCode]:
    name = ctx.ports.metadata.topic_name(bytes(topic_id))
    if name is None:
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    if denied(ctx, Op.READ, Res.TOPIC, name):
        return name, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return name, ErrorCode.NONE


async def _acknowledge(
    ctx: RequestContext,
    shares: SharePartitionManager,
    group_id: str,
    member_id: str,
    topics: Iterable[tuple[bytes, Iterable[tuple[int, list[tuple[int, int, list[int]]]]]]],
    session_partitions: set[TopicPartition] | None,
    deadline_ms: int,
) -> tuple[dict[tuple[bytes, int], ErrorCode], dict[tuple[bytes, int], ErrorCode]]:
    """Apply acknowledgements and make them durable (before they are answered), every partition's at
    once, each waiting for its share coordinator until ``deadline_ms`` at most; returns (partition
    errors, acknowledge errors) by (topic id, index). A partition is added to ``session_partitions``
    when given (ShareFetch)."""
    errors: dict[tuple[bytes, int], ErrorCode] = {}
    asked: list[tuple[tuple[bytes, int], str, list[tuple[int, int, list[int]]]]] = []
    for topic_id, partitions in topics:
        name, code = _resolve(ctx, topic_id)
        for index, batches in partitions:
            key = (bytes(topic_id), index)
            if name is None or code is not ErrorCode.NONE:
                errors[key] = code
                continue
            if session_partitions is not None:
                session_partitions.add((name, index))
            if batches:
                asked.append((key, name, batches))

    async def one(name: str, index: int, batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        code = await shares.acknowledge(group_id, member_id, name, index, batches, deadline_ms)
        if _releases(batches):
            ctx.ports.purgatory.notify(release_key(group_id, name, index))
        return code

    codes = await asyncio.gather(*(one(name, key[1], batches) for key, name, batches in asked))
    return errors, {key: code for (key, _, _), code in zip(asked, codes, strict=True)}


def _shares(ctx: RequestContext) -> SharePartitionManager:
    shares = ctx.ports.shares
    assert shares is not None, "the broker builds its share-partition manager"
    return shares


# --- ShareFetch -----------------------------------------------------------------------------------


def _fetch_error(code: ErrorCode, message: str | None = None) -> m.ShareFetchResponse:
    return {
        "throttle_time_ms": 0,
        "error_code": int(code),
        "error_message": message,
        "acquisition_lock_timeout_ms": 0,
        "responses": [],
        "node_endpoints": [],
    }


def _fetch_entry(index: int) -> m.ShareFetchResponsePartitionData:
    return {
        "partition_index": index,
        "error_code": 0,
        "error_message": None,
        "acknowledge_error_code": 0,
        "acknowledge_error_message": None,
        "current_leader": NO_LEADER,
        "records": b"",  # never null: librdkafka 2.16 fails the whole response on a null record set
        "acquired_records": [],
    }


async def _acquire_all(
    ctx: RequestContext,
    shares: SharePartitionManager,
    group_id: str,
    member_id: str,
    partitions: list[TopicPartition],
    max_records: int,
    max_bytes: int,
    deadline_ms: int,
) -> tuple[dict[TopicPartition, AcquireResult], dict[TopicPartition, ErrorCode]]:
    """Acquire on the partitions in order until the limits; every partition's share-partition is
    loaded (and its expired locks written) first, all at once, so one slow share coordinator holds
    the others for no longer than ``deadline_ms``."""
    results: dict[TopicPartition, AcquireResult] = {}
    errors: dict[TopicPartition, ErrorCode] = {}
    loaded = await asyncio.gather(
        *(shares.load(group_id, topic, index, deadline_ms) for topic, index in partitions),
        return_exceptions=True,
    )
    for (topic, index), outcome in zip(partitions, loaded, strict=True):
        if isinstance(outcome, KafkaError):
            errors[(topic, index)] = outcome.code
        elif isinstance(outcome, OSError):
            errors[(topic, index)] = ErrorCode.KAFKA_STORAGE_ERROR
        elif isinstance(outcome, BaseException):
            raise outcome
    for topic, index in partitions:
        if max_records <= 0 or max_bytes <= 0:
            break
        if (topic, index) in errors:
            continue
        try:
            got = await shares.acquire_from_log(
                group_id, member_id, topic, index, max_records, max_bytes, deadline_ms
            )
        except KafkaError as exc:
            errors[(topic, index)] = exc.code
            continue
        except OSError:
            errors[(topic, index)] = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        if got.acquired:
            results[(topic, index)] = got
            max_records -= sum(r.last_offset - r.first_offset + 1 for r in got.acquired)
            max_bytes -= len(got.records)
    return results, errors


async def _released(
    ctx: RequestContext,
    shares: SharePartitionManager,
    released: Iterable[tuple[str, str, int]],
    deadline_ms: int,
) -> None:
    """Records were released on these share-partitions (group, topic, partition) as sessions went: the
    fetches waiting there wake up, the releases (their delivery counts) are written to the share
    coordinator, all at once, until ``deadline_ms`` at most (a failed write is carried by the
    share-partition's next), and a group left without sessions here re-reads its stored state at its
    next use."""
    keys = list(dict.fromkeys(released))
    for group_id, topic, index in keys:
        ctx.ports.purgatory.notify(release_key(group_id, topic, index))
    await asyncio.gather(*(shares.persist(g, t, i, deadline_ms) for g, t, i in keys))
    shares.mark_unused(group_id for group_id, _, _ in keys)


async def _evict_idle(ctx: RequestContext, shares: SharePartitionManager, deadline_ms: int) -> None:
    """Evict the idle share sessions and release what their members held."""
    await _released(ctx, shares, shares.evict_idle(), deadline_ms)


async def _close(
    ctx: RequestContext, shares: SharePartitionManager, session: ShareSession, deadline_ms: int
) -> None:
    """Close the session and release what its member holds."""
    shares.close_session(session)
    held = [(session.group_id, topic, index) for topic, index in session.partitions]
    await _released(ctx, shares, held, deadline_ms)


@handles(ApiKey.SHARE_FETCH)
async def handle_share_fetch(ctx: RequestContext, req: m.ShareFetchRequest) -> m.ShareFetchResponse:
    shares = _shares(ctx)
    group_id = req.get("group_id") or ""
    member_id = req.get("member_id") or ""
    if not group_id or not member_id:
        return _fetch_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required.")
    if denied(ctx, Op.READ, Res.GROUP, group_id):
        return _fetch_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    epoch = int(req["share_session_epoch"])
    deadline_ms = ctx.ports.clock.monotonic_ms() + max(int(req["max_wait_ms"]), 0)
    await _evict_idle(ctx, shares, deadline_ms)
    session, code = shares.session(group_id, member_id, epoch)
    if session is None:
        return _fetch_error(code)
    topics = [
        (
            bytes(t["topic_id"]),
            [(int(p["partition_index"]), _batches(p["acknowledgement_batches"])) for p in t["partitions"]],
        )
        for t in req["topics"]
    ]
    closing = epoch == CLOSE_EPOCH
    errors, acks = await _acknowledge(
        ctx, shares, group_id, member_id, topics, None if closing else session.partitions, deadline_ms
    )
    for forgotten in req.get("forgotten_topics_data", []):
        name = ctx.ports.metadata.topic_name(bytes(forgotten["topic_id"]))
        for index in forgotten["partitions"]:
            session.partitions.discard((str(name), int(index)))
    results: dict[TopicPartition, AcquireResult] = {}
    read_errors: dict[TopicPartition, ErrorCode] = {}
    if closing:
        await _close(ctx, shares, session, deadline_ms)
    else:
        partitions = sorted(session.partitions)
        results, read_errors = await _fetch(ctx, shares, req, group_id, member_id, partitions, deadline_ms)
    return _fetch_response(ctx, shares, topics, errors, acks, results, read_errors)


async def _fetch(
    ctx: RequestContext,
    shares: SharePartitionManager,
    req: m.ShareFetchRequest,
    group_id: str,
    member_id: str,
    partitions: list[TopicPartition],
    deadline_ms: int,
) -> tuple[dict[TopicPartition, AcquireResult], dict[TopicPartition, ErrorCode]]:
    clock = ctx.ports.clock
    max_records = int(req["max_records"]) if int(req["max_records"]) > 0 else DEFAULT_MAX_RECORDS
    max_bytes = max(int(req.get("max_bytes", 0x7FFFFFFF)), 1)
    keys: list[object] = [*partitions, *(release_key(group_id, t, i) for t, i in partitions)]
    while True:
        results, errors = await _acquire_all(
            ctx, shares, group_id, member_id, partitions, max_records, max_bytes, deadline_ms
        )
        if results or errors or not partitions:
            return results, errors
        remaining = deadline_ms - clock.monotonic_ms()
        if remaining <= 0 or not await ctx.ports.purgatory.wait(keys, remaining):
            # Locks that ran out while parked are released by this last pass.
            return await _acquire_all(
                ctx, shares, group_id, member_id, partitions, max_records, max_bytes, deadline_ms
            )


def _fetch_response(
    ctx: RequestContext,
    shares: SharePartitionManager,
    topics: list[tuple[bytes, list[tuple[int, list[tuple[int, int, list[int]]]]]]],
    errors: dict[tuple[bytes, int], ErrorCode],
    acks: dict[tuple[bytes, int], ErrorCode],
    results: dict[TopicPartition, AcquireResult],
    read_errors: dict[TopicPartition, ErrorCode],
) -> m.ShareFetchResponse:
    cache = ctx.ports.metadata
    entries: dict[tuple[bytes, int], m.ShareFetchResponsePartitionData] = {}
    leaders: list[int] = []

    def entry(topic_id: bytes, index: int) -> m.ShareFetchResponsePartitionData:
        found = entries.get((topic_id, index))
        if found is None:
            found = entries[(topic_id, index)] = _fetch_entry(index)
        return found

    for (topic_id, index), code in errors.items():
        entry(topic_id, index)["error_code"] = int(code)
    for (topic_id, index), code in acks.items():
        entry(topic_id, index)["acknowledge_error_code"] = int(code)
    ids = {name: info.topic_id for name, info in cache.topics.items()}
    for (topic, index), code in read_errors.items():
        if topic not in ids:
            continue
        e = entry(ids[topic], index)
        e["error_code"] = int(code)
        if int(code) in LEADER_MOVED and (hint := leader_hint(cache, topic, index)) is not None:
            e["current_leader"] = hint
            leaders.append(hint["leader_id"])
    for (topic, index), got in results.items():
        if topic not in ids:
            continue
        e = entry(ids[topic], index)
        e["records"] = got.records
        e["acquired_records"] = [
            {"first_offset": r.first_offset, "last_offset": r.last_offset, "delivery_count": r.delivery_count}
            for r in got.acquired
        ]
    by_topic: dict[bytes, list[m.ShareFetchResponsePartitionData]] = {}
    for (topic_id, _), e in sorted(entries.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        by_topic.setdefault(topic_id, []).append(e)
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "acquisition_lock_timeout_ms": shares.config.record_lock_duration_ms,
        "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in by_topic.items()],
        "node_endpoints": node_endpoints(cache, leaders, ctx.listener) if leaders else [],
    }


# --- ShareAcknowledge -----------------------------------------------------------------------------


def _ack_error(code: ErrorCode, message: str | None = None) -> m.ShareAcknowledgeResponse:
    return {
        "throttle_time_ms": 0,
        "error_code": int(code),
        "error_message": message,
        "responses": [],
        "node_endpoints": [],
    }


@handles(ApiKey.SHARE_ACKNOWLEDGE)
async def handle_share_acknowledge(
    ctx: RequestContext, req: m.ShareAcknowledgeRequest
) -> m.ShareAcknowledgeResponse:
    shares = _shares(ctx)
    group_id = req.get("group_id") or ""
    member_id = req.get("member_id") or ""
    if not group_id or not member_id:
        return _ack_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required.")
    if denied(ctx, Op.READ, Res.GROUP, group_id):
        return _ack_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    epoch = int(req["share_session_epoch"])
    if epoch == OPEN_EPOCH:
        return _ack_error(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a session.")
    deadline_ms = ctx.ports.clock.monotonic_ms() + ACKNOWLEDGE_TIMEOUT_MS
    await _evict_idle(ctx, shares, deadline_ms)
    session, code = shares.session(group_id, member_id, epoch)
    if session is None:
        return _ack_error(code)
    topics = [
        (
            bytes(t["topic_id"]),
            [(int(p["partition_index"]), _batches(p["acknowledgement_batches"])) for p in t["partitions"]],
        )
        for t in req["topics"]
    ]
    errors, acks = await _acknowledge(ctx, shares, group_id, member_id, topics, None, deadline_ms)
    if epoch == CLOSE_EPOCH:
        await _close(ctx, shares, session, deadline_ms)
    responses: list[m.ShareAcknowledgeResponseTopicResponse] = []
    for topic_id, partitions in topics:
        parts: list[m.ShareAcknowledgeResponsePartitionData] = []
        for index, _ in partitions:
            key = (topic_id, index)
            code = errors.get(key, acks.get(key, ErrorCode.NONE))
            parts.append(
                {
                    "partition_index": index,
                    "error_code": int(code),
                    "error_message": None,
                    "current_leader": NO_LEADER,
                }
            )
        responses.append({"topic_id": topic_id, "partitions": parts})
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "responses": responses,
        "node_endpoints": [],
    }
