"""Fetch (key 1), sessionless: stored batches served as file ranges, long-polled through the purgatory.

The records of each partition are `FileRecords` (slices of segment files, no bytes read here); the
network layer sends them with ``sendfile`` (server.py, response_writer.py).

Rules (docs/protocol.md#fetch-responses):
- every requested partition appears in the response, with an error code if need be;
- reading starts at the batch containing the fetch offset and stops at the high watermark (the last
  stable offset, equal to it without transactions, for read_committed);
- the first partition that has data returns at least one whole batch even beyond `max_bytes` (KIP-74),
  so a consumer always progresses; the response stays within `max_bytes` otherwise and each partition
  within its `partition_max_bytes`;
- with fewer than `min_bytes` available the request parks in the purgatory until one of its partitions
  has more to read or `max_wait_ms` passes, then answers with what there is: a follower's fetch is woken
  by appends, a consumer's by high-watermark moves (partition.py);
- session_id is always 0: Strom declines fetch sessions, which every client handles;
- followers (`replica_id` >= 0) and consumers below v11 fetch from the leader only
  (NOT_LEADER_OR_FOLLOWER elsewhere; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a stale or future
  `current_leader_epoch`). A follower reads up to the log end offset, and its fetch offset is its log
  end offset, reported once per request to the replica manager (high watermark, ISR expansion); with
  a replica selector configured, its parked fetch also completes when the high watermark passes the
  one it was last sent (followers then serve consumers; docs/benchmarks.md gives the cost);
- fetch from the closest replica (KIP-392, replica_selector.py): with `replica.selector.class` set, the
  leader answers a v11+ consumer in another rack (`rack_id`) with `preferred_read_replica` and no
  records, at once. A consumer's v11+ fetch is served by any replica hosting the partition, at its
  epoch: consumers read below the high watermark (on a follower, the one it learnt from the leader) or,
  read_committed, the last stable offset (bounded by that high watermark; aborted transactions from the
  replica's own transaction index). A fetch offset above the high watermark but within the log answers
  empty (long-polled), as Kafka's; outside [log start, log end] OFFSET_OUT_OF_RANGE, except on a follower
  for a client that sent no leader epoch, which gets an empty answer (KAFKA-14255: without KIP-320 it
  cannot tell a lagging follower from a truncated log). A follower that the cluster's metadata no longer
  lists in the ISR answers REPLICA_NOT_AVAILABLE (Strom's addition: the client goes back to the leader at
  once instead of reading a stalled replica until its lease ends). ListOffsets and offset commits stay
  with the leader and the group coordinator.

Newer versions (topic_ids.py): from v13 topics are named by id (resolved through the metadata cache;
UNKNOWN_TOPIC_ID for an unknown one), from v15 the follower's id is in ``replica_state``, and from v16
a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its current leader, whose
address the response's ``node_endpoints`` gives (KIP-951). v12's diverging epoch and snapshot id are
for KRaft followers and stay unset; so are v17's directory id and v18's high watermark, which only
followers send.

With ACLs on, a consumer needs READ on each topic and a follower CLUSTER_ACTION on the cluster; other
topics answer TOPIC_AUTHORIZATION_FAILED and the rest of the request is served as usual.

Waits are on the broker's clock (the purgatory's deadlines), so a manual clock drives them in tests.
"""

from __future__ import annotations

from time import perf_counter_ns

from strom.broker.authorization import Authorizer
from strom.broker.handlers.authz import Op, Res
from strom.broker.handlers.base import RequestContext, handles
from strom.broker.handlers.topic_ids import LEADER_MOVED, leader_hint, node_endpoints
from strom.broker.replication.partition import follower_fetch_key
from strom.broker.replication.replica_manager import NO_REDIRECT
from strom.broker.tiered.remote_fetch import PendingRemoteRead, complete_remote_reads
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    FetchRequest,
    FetchRequestTopic,
    FetchResponse,
    FetchResponseFetchableTopicResponse,
    FetchResponsePartitionData,
)
from strom.protocol.uuid_text import ZERO_UUID

READ_COMMITTED = 1
TOPIC_ID_VERSION = 13  # topics named by id (KIP-516)
NEW_LEADER_VERSION = 16  # current_leader and node_endpoints (KIP-951)


def _empty(
    index: int, code: ErrorCode, hwm: int = -1, lso: int = -1, log_start: int = -1
) -> FetchResponsePartitionData:
    return {
        "partition_index": index,
        "error_code": int(code),
        "high_watermark": hwm,
        "last_stable_offset": lso,
        "log_start_offset": log_start,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _read_all(
    ctx: RequestContext,
    req: FetchRequest,
    first_pass: bool = False,
    remote: list[PendingRemoteRead] | None = None,
) -> tuple[list[FetchResponseFetchableTopicResponse], int, bool]:
    """One pass over the requested partitions: (responses, bytes read, answer now: an error, a
    preferred read replica, or news of the high watermark for a follower). With tiered storage, a
    consumer's partition below the local log start is added to ``remote`` (tiered/remote_fetch.py); a
    follower's is answered OFFSET_MOVED_TO_TIERED_STORAGE once the partition has a remote log (it then
    starts at the local log start, replica_fetcher.py)."""
    rm = ctx.ports.replica_manager
    replica_id = _replica_id(req)
    read_committed = int(req.get("isolation_level", 0)) == READ_COMMITTED
    client_rack = str(req.get("rack_id") or "") if ctx.api_version >= 11 and replica_id < 0 else None
    remaining = max(int(req.get("max_bytes", 0x7FFFFFFF)), 0)
    total = 0
    errored = False
    responses: list[FetchResponseFetchableTopicResponse] = []
    for topic in req["topics"]:
        name = topic["topic"]
        parts: list[FetchResponsePartitionData] = []
        for p in topic["partitions"]:
            index = int(p["partition"])
            limit = min(int(p["partition_max_bytes"]), remaining)
            try:
                data, hwm, log_start, lso, aborted, note = rm.fetch_records(
                    name,
                    index,
                    int(p.get("current_leader_epoch", -1)),
                    int(p["fetch_offset"]),
                    max(limit, 0),
                    total == 0,
                    replica_id,
                    int(p.get("log_start_offset", -1)),
                    first_pass,
                    read_committed,
                    client_rack,
                )
            except KafkaError as exc:
                errored = True
                entry = _empty(index, exc.code, log_start=rm.log_start_offset_if_hosted(name, index))
                parts.append(entry)
                if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE and remote is not None:
                    part = rm.partitions.get((name, index))
                    if part is None or int(p["fetch_offset"]) >= part.log_start_offset:
                        pass
                    elif replica_id < 0:
                        fetch_offset = int(p["fetch_offset"])
                        remote.append(
                            PendingRemoteRead(entry, part, fetch_offset, max(limit, 0), read_committed)
                        )
                    elif rm.is_tiered(name, index):
                        # KIP-405: a follower starts at this local log start with the remote log's state
                        entry["error_code"] = int(ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE)
                if ctx.api_version >= NEW_LEADER_VERSION and exc.code in LEADER_MOVED:
                    hint = leader_hint(ctx.ports.metadata, name, index)
                    if hint is not None:
                        entry["current_leader"] = hint
                continue
            except OSError:  # e.g. out of descriptors reopening a segment: this partition only
                errored = True
                parts.append(_empty(index, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            total += len(data)
            remaining -= len(data)
            entry = _empty(index, ErrorCode.NONE, hwm, lso, log_start)
            entry["records"] = data
            entry["aborted_transactions"] = aborted
            if note != NO_REDIRECT:
                errored = True  # answer now: a redirection, or a follower's news of the high watermark
                if note >= 0:
                    entry["preferred_read_replica"] = note
            parts.append(entry)
        responses.append({"topic": name, "topic_id": topic.get("topic_id", ZERO_UUID), "partitions": parts})
    return responses, total, errored


def _replica_id(req: FetchRequest) -> int:
    """Who fetches: a follower's broker id, or -1 for a consumer (in ``replica_state`` from v15)."""
    state = req.get("replica_state")
    return int(state["replica_id"]) if state else int(req.get("replica_id", -1))


def _resolve_topic_ids(
    ctx: RequestContext, req: FetchRequest
) -> tuple[FetchRequest, list[FetchResponseFetchableTopicResponse]]:
    """v13+: the request with each topic's name filled in from its id, and the answers for ids that no
    topic has (UNKNOWN_TOPIC_ID for each partition)."""
    cache = ctx.ports.metadata
    known: list[FetchRequestTopic] = []
    unknown: list[FetchResponseFetchableTopicResponse] = []
    for t in req["topics"]:
        name = cache.topic_name(bytes(t["topic_id"]))
        if name is None:
            unknown.append(
                {
                    "topic_id": t["topic_id"],
                    "partitions": [
                        _empty(int(p["partition"]), ErrorCode.UNKNOWN_TOPIC_ID) for p in t["partitions"]
                    ],
                }
            )
        else:
            known.append({**t, "topic": name})
    named = req.copy()  # the caller's body stays as decoded
    named["topics"] = known
    return named, unknown


def _authorize(
    ctx: RequestContext, auth: Authorizer, req: FetchRequest
) -> tuple[FetchRequest, list[FetchResponseFetchableTopicResponse]]:
    """The request without the topics the sender may not read, and the answers for those topics.

    A follower's fetch needs CLUSTER_ACTION on the cluster, a consumer's READ on each topic; refused
    topics answer TOPIC_AUTHORIZATION_FAILED, as Kafka's.
    """
    who, host = ctx.principal, ctx.client_host
    topics = req["topics"]
    if _replica_id(req) >= 0:
        ok = auth.allowed(who, host, Op.CLUSTER_ACTION, Res.CLUSTER, "kafka-cluster")
        verdicts = [ok] * len(topics)
    else:
        verdicts = [auth.allowed(who, host, Op.READ, Res.TOPIC, t["topic"]) for t in topics]
    if all(verdicts):
        return req, []
    # Split by verdict (a membership test against the readable list was quadratic in the topics).
    readable = [t for t, ok in zip(topics, verdicts, strict=True) if ok]
    refused: list[FetchResponseFetchableTopicResponse] = [
        {
            "topic": t["topic"],
            "topic_id": t.get("topic_id", ZERO_UUID),
            "partitions": [
                _empty(int(p["partition"]), ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in t["partitions"]
            ],
        }
        for t, ok in zip(topics, verdicts, strict=True)
        if not ok
    ]
    allowed = req.copy()  # the caller's body stays as decoded
    allowed["topics"] = readable
    return allowed, refused


@handles(ApiKey.FETCH)
async def handle_fetch(ctx: RequestContext, req: FetchRequest) -> FetchResponse:
    refused: list[FetchResponseFetchableTopicResponse] = []
    if ctx.api_version >= TOPIC_ID_VERSION:
        req, refused = _resolve_topic_ids(ctx, req)
    if (auth := ctx.ports.authorizer) is not None:
        req, denied = _authorize(ctx, auth, req)
        refused += denied
    clock = ctx.ports.clock
    deadline_ms = clock.monotonic_ms() + max(int(req.get("max_wait_ms", 0)), 0)
    min_bytes = int(req.get("min_bytes", 0))
    replica_id = _replica_id(req)
    tps = [(t["topic"], int(p["partition"])) for t in req["topics"] for p in t["partitions"]]
    keys = [follower_fetch_key(tp) for tp in tps] if replica_id >= 0 else tps
    first_pass = True
    rlm = ctx.ports.remote_log_manager
    while True:
        remote: list[PendingRemoteRead] | None = [] if rlm is not None else None
        responses, total, errored = _read_all(ctx, req, first_pass, remote)
        if remote and rlm is not None:
            await complete_remote_reads(rlm, clock, remote)
        first_pass = False
        if total >= min_bytes or errored or not keys:
            break
        parked = perf_counter_ns()
        woken = await ctx.ports.purgatory.wait(keys, deadline_ms - clock.monotonic_ms())
        ctx.remote_ns += perf_counter_ns() - parked
        if not woken:
            responses, _, _ = _read_all(ctx, req)
            break
    if (metrics := ctx.ports.metrics) is not None:
        metrics.fetched(responses, replica_id >= 0)
    if refused:
        responses += refused
    answer: FetchResponse = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
    if ctx.api_version >= NEW_LEADER_VERSION:
        leaders = [
            hint["leader_id"] for t in responses for p in t["partitions"] if (hint := p.get("current_leader"))
        ]
        if leaders:
            answer["node_endpoints"] = node_endpoints(ctx.ports.metadata, leaders, ctx.listener)
    return answer
