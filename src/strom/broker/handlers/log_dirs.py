"""AlterReplicaLogDirs (34, KIP-113): move replicas between this broker's log dirs.

Each partition gets its own error code (strom.broker.replication.log_dir_moves decides them): NONE
once its move has started (it completes in the background; DescribeLogDirs shows the replica under its
destination with ``is_future_key`` until then), LOG_DIR_NOT_FOUND for a dir that is not one of
``log.dirs``, REPLICA_NOT_AVAILABLE for a partition this broker does not host (created here later, it
goes to that dir). ALTER on the cluster is required (CLUSTER_AUTHORIZATION_FAILED for every partition
otherwise), as in Kafka. A partition named twice takes the last dir, as Kafka's map of them does.
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, allowed_cluster
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirsResponseAlterReplicaLogDirTopicResult,
)
from strom.storage.checkpoint import TopicPartition


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS)
async def handle_alter_replica_log_dirs(
    ctx: RequestContext, req: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    asked: dict[TopicPartition, str] = {}
    for entry in req["dirs"]:
        for topic in entry["topics"]:
            for index in topic["partitions"]:
                asked[TopicPartition(topic["name"], int(index))] = entry["path"]
    authorized = allowed_cluster(ctx, Op.ALTER)
    moves = ctx.ports.replica_manager.log_dir_moves
    results: dict[str, AlterReplicaLogDirsResponseAlterReplicaLogDirTopicResult] = {}
    for tp, path in asked.items():
        code = moves.alter(tp, path) if authorized else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        result = results.setdefault(tp.topic, {"topic_name": tp.topic, "partitions": []})
        result["partitions"].append({"partition_index": tp.partition, "error_code": int(code)})
    return {"throttle_time_ms": 0, "results": list(results.values())}
