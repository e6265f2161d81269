"""Transactional producer APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26) and
TxnOffsetCommit (28), and WriteTxnMarkers (27) from coordinators and admin tools.

Each handler checks that this broker coordinates the transactional id, translates the negotiated
version's wire dict and lets the transaction service decide (`strom.broker.coordinators.transaction_service`),
which answers once the resulting state is durable in ``__transaction_state``. Error mapping as Kafka's
KafkaApis: PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH below v2
(docs/transactions.md#what-a-client-sees). AddPartitionsToTxn answers one code for every partition of the
request (the coordinator decides for the request as a whole); partitions of unknown topics fail it with
UNKNOWN_TOPIC_OR_PARTITION and the others get OPERATION_NOT_ATTEMPTED, as Kafka does. AddOffsetsToTxn adds the
group's ``__consumer_offsets`` partition to the transaction; TxnOffsetCommit goes to the group's coordinator,
which holds the offsets pending until the transaction's marker reaches that partition
(`GroupService.commit_txn_offsets`). From v3 (KIP-447) it carries the consumer's group metadata,
checked against the group before anything is written (`GroupCoordinator.txn_commit_error`:
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID for every partition).
"""

from __future__ import annotations

from strom.broker.coordinators.group_service import OFFSETS_TOPIC
from strom.broker.handlers.authz import Op, Res, allowed_cluster, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.coordinator import GroupCoordinator, OffsetAndMetadata, TopicPartition
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponseResult,
    AddPartitionsToTxnResponseTopicResult,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseWritableTxnMarkerPartitionResult,
    WriteTxnMarkersResponseWritableTxnMarkerResult,
    WriteTxnMarkersResponseWritableTxnMarkerTopicResult,
)

PRODUCER_FENCED_FROM_VERSION = 2
BROKER_BATCH_FROM_VERSION = 4  # AddPartitionsToTxn: transactions from partition leaders (KIP-890)


def _code(ctx: RequestContext, code: ErrorCode) -> ErrorCode:
    if code is ErrorCode.PRODUCER_FENCED and ctx.api_version < PRODUCER_FENCED_FROM_VERSION:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _ensure_topic(ctx: RequestContext) -> ErrorCode | None:
    try:
        ctx.ports.transactions.ensure_topic()
    except KafkaError:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return None


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
async def handle_add_partitions_to_txn(
    ctx: RequestContext, req: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if ctx.api_version >= BROKER_BATCH_FROM_VERSION:
        return await _add_partitions_batch(ctx, req)
    topics = req["v3_and_below_topics"]
    codes = await _add_or_verify(
        ctx,
        req["v3_and_below_transactional_id"],
        int(req["v3_and_below_producer_id"]),
        int(req["v3_and_below_producer_epoch"]),
        topics,
        verify_only=False,
    )
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(topics, codes)}


async def _add_partitions_batch(
    ctx: RequestContext, req: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    """v4+ (KIP-890), from partition leaders: several transactions, each added to or, with
    ``verify_only``, checked against its ongoing transaction; CLUSTER_ACTION required, as Kafka does."""
    if not allowed_cluster(ctx, Op.CLUSTER_ACTION):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {"throttle_time_ms": 0, "error_code": code, "results_by_transaction": []}
    results: list[AddPartitionsToTxnResponseResult] = []
    for txn in req["transactions"]:
        codes = await _add_or_verify(
            ctx,
            txn["transactional_id"],
            int(txn["producer_id"]),
            int(txn["producer_epoch"]),
            txn["topics"],
            verify_only=bool(txn["verify_only"]),
        )
        results.append(
            {
                "transactional_id": txn["transactional_id"],
                "topic_results": _topic_results(txn["topics"], codes),
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": results}


async def _add_or_verify(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: list[AddPartitionsToTxnRequestTopic],
    verify_only: bool,
) -> dict[tuple[str, int], ErrorCode]:
    """One transaction's partitions: each one's code (unknown topics fail the whole set)."""
    wanted = [(t["name"], int(p)) for t in topics for p in t["partitions"]]
    known = ctx.ports.metadata.topics
    unknown = {tp for tp in wanted if tp[0] not in known or not 0 <= tp[1] < known[tp[0]].partitions}
    refused = None if verify_only else _refused_topics(ctx, transactional_id, wanted)
    if refused is not None:
        return refused
    if unknown:
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    if verify_only:
        verdicts = ctx.ports.transactions.verify_partitions(
            transactional_id, producer_id, producer_epoch, wanted
        )
        return {tp: _code(ctx, code) for tp, code in verdicts.items()}
    code = _ensure_topic(ctx)
    if code is None:
        code = await ctx.ports.transactions.add_partitions(
            transactional_id, producer_id, producer_epoch, wanted
        )
    return dict.fromkeys(wanted, _code(ctx, code))


def _topic_results(
    topics: list[AddPartitionsToTxnRequestTopic], codes: dict[tuple[str, int], ErrorCode]
) -> list[AddPartitionsToTxnResponseTopicResult]:
    return [
        {
            "name": t["name"],
            "results_by_partition": [
                {"partition_index": int(p), "partition_error_code": int(codes[(t["name"], int(p))])}
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


def _refused_topics(
    ctx: RequestContext, txn_id: str, wanted: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode] | None:
    """ACLs for AddPartitionsToTxn: WRITE on the transactional id, then on each topic (Kafka's codes)."""
    if ctx.ports.authorizer is None:
        return None
    if denied(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    bad = {tp for tp in wanted if denied(ctx, Op.WRITE, Res.TOPIC, tp[0])}
    if not bad:
        return None
    return {
        tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in bad else ErrorCode.OPERATION_NOT_ATTEMPTED
        for tp in wanted
    }


@handles(ApiKey.END_TXN)
async def handle_end_txn(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    if denied(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, req["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
    code = _ensure_topic(ctx)
    if code is None:
        code = await ctx.ports.transactions.end_txn(
            req["transactional_id"],
            int(req["producer_id"]),
            int(req["producer_epoch"]),
            bool(req["committed"]),
        )
    return {"throttle_time_ms": 0, "error_code": int(_code(ctx, code))}


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
async def handle_add_offsets_to_txn(
    ctx: RequestContext, req: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    if denied(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, req["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
    if denied(ctx, Op.READ, Res.GROUP, req["group_id"]):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    code = _ensure_topic(ctx)
    groups = ctx.ports.groups
    if code is None:
        try:
            groups.ensure_offsets_topic()
        except KafkaError:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code is None:
        partition = groups.coordinator.partition_for(req["group_id"])
        code = await ctx.ports.transactions.add_partitions(
            req["transactional_id"],
            int(req["producer_id"]),
            int(req["producer_epoch"]),
            [(OFFSETS_TOPIC, partition)],
        )
    return {"throttle_time_ms": 0, "error_code": int(_code(ctx, code))}


@handles(ApiKey.TXN_OFFSET_COMMIT)
async def handle_txn_offset_commit(
    ctx: RequestContext, req: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    group_id = req["group_id"]
    groups = ctx.ports.groups
    known = ctx.ports.metadata.topics
    order: list[TopicPartition] = []
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    results: dict[TopicPartition, ErrorCode] = {}
    for topic in req["topics"]:
        for p in topic["partitions"]:
            tp = TopicPartition(topic["name"], int(p["partition_index"]))
            order.append(tp)
            if denied(ctx, Op.READ, Res.TOPIC, tp.topic):
                results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            info = known.get(tp.topic)
            if info is None or not 0 <= tp.partition < info.partitions:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = OffsetAndMetadata(
                int(p["committed_offset"]),
                int(p.get("committed_leader_epoch", -1)),
                p.get("committed_metadata") or "",
            )
    if denied(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, req["transactional_id"]):
        results.update(dict.fromkeys(offsets, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    elif denied(ctx, Op.READ, Res.GROUP, group_id):
        results.update(dict.fromkeys(offsets, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    elif not group_id:
        results.update(dict.fromkeys(offsets, ErrorCode.INVALID_GROUP_ID))
    elif (refused := groups.coordinator_error(group_id)) is not None:
        results.update(dict.fromkeys(offsets, refused))
    elif offsets and (member_error := _group_metadata_error(groups.coordinator, group_id, req)) is not None:
        results.update(dict.fromkeys(offsets, member_error))
    elif offsets:
        groups.ensure_offsets_topic()
        results.update(
            await groups.commit_txn_offsets(
                group_id, int(req["producer_id"]), int(req["producer_epoch"]), offsets
            )
        )
    by_topic: dict[str, list[TxnOffsetCommitResponsePartition]] = {}
    for tp in order:
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": int(results[tp])}
        )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


def _group_metadata_error(
    coordinator: GroupCoordinator, group_id: str, req: TxnOffsetCommitRequest
) -> ErrorCode | None:
    """KIP-447 (v3+): the group metadata's verdict, None when it lets the commit through."""
    code = coordinator.txn_commit_error(
        group_id,
        int(req.get("generation_id", -1)),
        req.get("member_id") or "",
        req.get("group_instance_id"),
    )
    return None if code is ErrorCode.NONE else code


@handles(ApiKey.WRITE_TXN_MARKERS)
async def handle_write_txn_markers(
    ctx: RequestContext, req: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    """A transaction coordinator to a partition leader, or an admin tool aborting a hanging transaction
    there (its coordinator epoch is the one DescribeProducers reports, so the marker passes the
    partition's fencing checks like the coordinator's own)."""
    service = ctx.ports.transactions
    markers: list[WriteTxnMarkersResponseWritableTxnMarkerResult] = []
    cluster_action = allowed_cluster(ctx, Op.CLUSTER_ACTION)
    for marker in req["markers"]:
        pid, epoch = int(marker["producer_id"]), int(marker["producer_epoch"])
        commit, coordinator_epoch = bool(marker["transaction_result"]), int(marker["coordinator_epoch"])
        topics: list[WriteTxnMarkersResponseWritableTxnMarkerTopicResult] = []
        for t in marker["topics"]:
            parts: list[WriteTxnMarkersResponseWritableTxnMarkerPartitionResult] = []
            for p in t["partition_indexes"]:
                if not cluster_action:
                    parts.append(
                        {"partition_index": int(p), "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}
                    )
                    continue
                code = await service.write_local_marker(
                    t["name"], int(p), pid, epoch, commit, coordinator_epoch
                )
                parts.append({"partition_index": int(p), "error_code": int(code)})
            topics.append({"name": t["name"], "partitions": parts})
        markers.append({"producer_id": pid, "topics": topics})
    return {"markers": markers}
