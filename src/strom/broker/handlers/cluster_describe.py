"""The admin APIs that describe the cluster without Metadata: DescribeCluster (60), DescribeTopicPartitions
(75), DescribeLogDirs (35).

DescribeCluster (KIP-700) answers the cluster id, the controller and the live brokers at their address
on the client's listener, as Metadata does; v1's endpoint type 2 (controllers) is KRaft's and answers
UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker does; v2's fenced flag is always false (a ZooKeeper-mode
broker is live or absent). The cluster's authorized operations come only when asked for.

DescribeTopicPartitions (KIP-966) is Metadata for many partitions, paged: the topics asked for (all
when none are named) in name order, partitions in index order, starting at the request's cursor and
stopping after ``response_partition_limit`` partitions; ``next_cursor`` then names the first partition
left out, and the client asks again from there. A named topic that does not exist, or that the sender
may not DESCRIBE, answers UNKNOWN_TOPIC_OR_PARTITION or TOPIC_AUTHORIZATION_FAILED; listing all
topics leaves out those it may not DESCRIBE. ELR fields (KIP-966's eligible leader replicas) are
KRaft's and stay null. Each topic carries the sender's authorized operations on it (the request has no
flag for them: Kafka always answers them, every operation without an authorizer).

DescribeLogDirs answers per log dir of this broker its partition replicas, with each one's size on disk
and offset lag (Kafka's: the high watermark minus the log end offset, floored at 0), and from v4 the
volume's total and usable bytes. It needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED, top
level from v3, otherwise no log dirs).
"""

from __future__ import annotations

from strom.acl.model import CLUSTER_NAME
from strom.broker.control.topic_admin import INTERNAL_TOPICS
from strom.broker.handlers.authz import Op, Res, allowed, allowed_cluster, authorized_operations
from strom.broker.handlers.base import RequestContext, handles, until_listed
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeClusterResponseBroker,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResponseResult,
    DescribeLogDirsResponseTopic,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseCursor,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from strom.protocol.uuid_text import ZERO_UUID

BROKERS_ENDPOINT = 1
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


@handles(ApiKey.DESCRIBE_CLUSTER)
async def handle_describe_cluster(
    ctx: RequestContext, req: DescribeClusterRequest
) -> DescribeClusterResponse:
    ports = ctx.ports
    await until_listed(ports)  # never an answer without brokers, as Metadata (base.py)
    cache = ports.metadata
    answer: DescribeClusterResponse = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": BROKERS_ENDPOINT,
        "cluster_id": ports.cluster_id,
        "controller_id": cache.controller_id,
        "brokers": [],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    if int(req.get("endpoint_type", BROKERS_ENDPOINT)) != BROKERS_ENDPOINT:
        answer["error_code"] = int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)
        answer["error_message"] = "this broker describes brokers only (endpoint type 1)"
        return answer
    brokers: list[DescribeClusterResponseBroker] = []
    for node_id, live in sorted(cache.brokers.items()):
        endpoint = live.endpoint(ctx.listener)
        if endpoint is not None:
            brokers.append(
                {
                    "broker_id": node_id,
                    "host": endpoint[0],
                    "port": endpoint[1],
                    "rack": live.rack,
                    "is_fenced": False,
                }
            )
    answer["brokers"] = brokers
    if req.get("include_cluster_authorized_operations"):
        answer["cluster_authorized_operations"] = authorized_operations(ctx, Res.CLUSTER, CLUSTER_NAME)
    return answer


def _partition(
    cache: ClusterMetadataStore, topic: str, index: int
) -> DescribeTopicPartitionsResponsePartition:
    meta = cache.partitions.get((topic, index))
    if meta is None:
        return {
            "error_code": int(ErrorCode.LEADER_NOT_AVAILABLE),
            "partition_index": index,
            "leader_id": -1,
            "leader_epoch": -1,
            "replica_nodes": [],
            "isr_nodes": [],
            "eligible_leader_replicas": None,
            "last_known_elr": None,
            "offline_replicas": [],
        }
    return {
        "error_code": 0 if meta.leader >= 0 else int(ErrorCode.LEADER_NOT_AVAILABLE),
        "partition_index": index,
        "leader_id": meta.leader,
        "leader_epoch": meta.leader_epoch,
        "replica_nodes": list(meta.replicas),
        "isr_nodes": list(meta.isr),
        "eligible_leader_replicas": None,
        "last_known_elr": None,
        "offline_replicas": list(meta.offline_replicas),
    }


def _topic_error(name: str, code: ErrorCode) -> DescribeTopicPartitionsResponseTopic:
    return {
        "error_code": int(code),
        "name": name,
        "topic_id": ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
async def handle_describe_topic_partitions(
    ctx: RequestContext, req: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    cache = ctx.ports.metadata
    named = sorted({t["name"] for t in req["topics"]})
    if named:
        names = named
    else:  # all topics: those the sender may not DESCRIBE are left out, as from Metadata
        names = sorted(n for n in cache.topics if allowed(ctx, Op.DESCRIBE, Res.TOPIC, n))
    cursor = req.get("cursor")
    start_topic, start_index = (cursor["topic_name"], int(cursor["partition_index"])) if cursor else ("", 0)
    budget = max(int(req.get("response_partition_limit", 2000)), 1)
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: DescribeTopicPartitionsResponseCursor | None = None
    for name in names:
        if name < start_topic:
            continue
        info = cache.topics.get(name)
        if not allowed(ctx, Op.DESCRIBE, Res.TOPIC, name):
            topics.append(_topic_error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if info is None:
            topics.append(_topic_error(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        first = start_index if name == start_topic else 0
        if budget == 0:
            next_cursor = {"topic_name": name, "partition_index": first}
            break
        last = min(info.partitions, first + budget)
        partitions = [_partition(cache, name, p) for p in range(first, last)]
        budget -= len(partitions)
        topics.append(
            {
                "error_code": 0,
                "name": name,
                "topic_id": info.topic_id,
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": partitions,
                "topic_authorized_operations": authorized_operations(ctx, Res.TOPIC, name),
            }
        )
        if last < info.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


@handles(ApiKey.DESCRIBE_LOG_DIRS)
async def handle_describe_log_dirs(
    ctx: RequestContext, req: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    if not allowed_cluster(ctx, Op.DESCRIBE):
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            "results": [],
        }
    asked = req.get("topics")
    wanted = None if asked is None else {(t["topic"], int(p)) for t in asked for p in t["partitions"]}
    results: list[DescribeLogDirsResponseResult] = []
    for usage in ctx.ports.replica_manager.log_dir_moves.describe():
        topics: dict[str, DescribeLogDirsResponseTopic] = {}
        for (topic, index), size, lag in usage.replicas:
            if wanted is not None and (topic, index) not in wanted:
                continue
            entry = topics.setdefault(topic, {"name": topic, "partitions": []})
            entry["partitions"].append(
                {"partition_index": index, "partition_size": size, "offset_lag": lag, "is_future_key": False}
            )
        for (topic, index), size, lag in usage.futures:  # replicas being moved here (log_dirs.py)
            if wanted is not None and (topic, index) not in wanted:
                continue
            entry = topics.setdefault(topic, {"name": topic, "partitions": []})
            entry["partitions"].append(
                {"partition_index": index, "partition_size": size, "offset_lag": lag, "is_future_key": True}
            )
        results.append(
            {
                "error_code": int(ErrorCode.KAFKA_STORAGE_ERROR if usage.failed else ErrorCode.NONE),
                "log_dir": usage.path,
                "topics": list(topics.values()),
                "total_bytes": usage.total_bytes,
                "usable_bytes": usage.usable_bytes,
                "is_cordoned": False,
            }
        )
    return {"throttle_time_ms": 0, "error_code": 0, "results": results}
