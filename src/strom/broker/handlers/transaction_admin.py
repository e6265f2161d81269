"""Transaction admin APIs (KIP-664): DescribeTransactions (65), ListTransactions (66), DescribeProducers (61).

All three are flexible-only (v0 is flexible) and sent by admin tools, not by producers.

- DescribeTransactions goes to each id's coordinator (FindCoordinator key type 1). Per id: state
  (Kafka's names), timeout, start time (-1 when no transaction has started), producer id and epoch,
  and the partitions of the open transaction (while it is Prepare*, those whose marker is not written
  yet, as Kafka reports them). Another broker's id: NOT_COORDINATOR; an unknown one:
  TRANSACTIONAL_ID_NOT_FOUND; while the id's partition loads: COORDINATOR_LOAD_IN_PROGRESS.
- ListTransactions is answered by every broker for the ids it coordinates (admin clients ask each
  broker and merge), with the state, producer id, (v1+) duration and (v2+) transactional id pattern
  filters of `strom.transaction.describe`; unknown state names come back in ``unknown_state_filters``,
  a pattern that is no regular expression gets INVALID_REGULAR_EXPRESSION.
- DescribeProducers is answered by a replica of each partition from its log's producer state (as
  Kafka's ``Partition.activeProducerState``): producer id and epoch, last sequence and timestamp,
  the coordinator epoch of its last marker and the first offset of its open transaction (-1 if none).
  A partition not hosted here: NOT_LEADER_OR_FOLLOWER; an unknown one: UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, Res, allowed, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersResponsePartitionResponse,
    DescribeProducersResponseProducerState,
    DescribeProducersResponseTopicResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseTransactionState,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from strom.transaction.coordinator import TxnMetadata
from strom.transaction.describe import NO_DURATION_FILTER, Listing, compile_pattern
from strom.transaction.records import topic_partitions


@handles(ApiKey.DESCRIBE_TRANSACTIONS)
async def handle_describe_transactions(
    ctx: RequestContext, req: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    service = ctx.ports.transactions
    states: list[DescribeTransactionsResponseTransactionState] = []
    for tid in req["transactional_ids"]:
        if denied(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, tid):
            states.append(_described(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, frozenset()))
            continue
        code, meta, partitions = service.describe_transaction(tid)
        states.append(_described(tid, code, meta, partitions))
    return {"throttle_time_ms": 0, "transaction_states": states}


def _described(
    tid: str, code: ErrorCode, meta: TxnMetadata | None, partitions: frozenset[tuple[str, int]]
) -> DescribeTransactionsResponseTransactionState:
    if meta is None:
        return {
            "error_code": int(code),
            "transactional_id": tid,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
    return {
        "error_code": 0,
        "transactional_id": tid,
        "transaction_state": meta.state.kafka_name,
        "transaction_timeout_ms": meta.timeout_ms,
        "transaction_start_time_ms": meta.start_ms,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "topics": [
            {"topic": topic, "partitions": indexes} for topic, indexes in topic_partitions(partitions)
        ],
    }


@handles(ApiKey.LIST_TRANSACTIONS)
async def handle_list_transactions(
    ctx: RequestContext, req: ListTransactionsRequest
) -> ListTransactionsResponse:
    try:
        pattern = compile_pattern(req.get("transactional_id_pattern"))
    except ValueError:
        code, listing = ErrorCode.INVALID_REGULAR_EXPRESSION, Listing([], [])
    else:
        code, listing = ctx.ports.transactions.list_transactions(
            list(req["state_filters"]),
            [int(pid) for pid in req["producer_id_filters"]],
            int(req.get("duration_filter", NO_DURATION_FILTER)),
            pattern,
        )
    return {
        "throttle_time_ms": 0,
        "error_code": int(code),
        "unknown_state_filters": listing.unknown_state_filters,
        "transaction_states": [
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.kafka_name,
            }
            for meta in listing.transactions
            # ACLs: only the transactional ids the sender may DESCRIBE are listed (Kafka's rule).
            if allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, meta.transactional_id)
        ],
    }


@handles(ApiKey.DESCRIBE_PRODUCERS)
async def handle_describe_producers(
    ctx: RequestContext, req: DescribeProducersRequest
) -> DescribeProducersResponse:
    topics: list[DescribeProducersResponseTopicResponse] = []
    for t in req["topics"]:
        parts = [_producers(ctx, t["name"], int(p)) for p in t["partition_indexes"]]
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _producers(ctx: RequestContext, topic: str, index: int) -> DescribeProducersResponsePartitionResponse:
    if denied(ctx, Op.READ, Res.TOPIC, topic):
        return _partition_error(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    info = ctx.ports.metadata.topics.get(topic)
    if info is None or not 0 <= index < info.partitions:
        return _partition_error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        producers = ctx.ports.replica_manager.active_producers(topic, index)
    except KafkaError as exc:
        return _partition_error(index, exc.code)
    active: list[DescribeProducersResponseProducerState] = [
        {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": entry.current_txn_first_offset,
        }
        for entry in producers
    ]
    return {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": active}


def _partition_error(index: int, code: ErrorCode) -> DescribeProducersResponsePartitionResponse:
    return {"partition_index": index, "error_code": int(code), "error_message": None, "active_producers": []}
