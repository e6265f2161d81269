"""Cluster APIs: the controller's requests to brokers, leader-epoch queries and the admin election APIs.

Broker-to-broker, never advertised (layouts in protocol/internal_specs.py):
* LeaderAndIsr (4), StopReplica (5) and UpdateMetadata (6) go to the control plane, which hands them to
  the replica manager and the metadata cache (a single node, its own controller, refuses them with
  INVALID_REQUEST); ControlledShutdown (7) is answered by the active controller only (NOT_CONTROLLER
  elsewhere).

Advertised:
* OffsetForLeaderEpoch (23, v2..3): answered by the leader only, from the leader-epoch cache: the largest
  epoch <= the requested one and where it ends (the log end offset for the current epoch). Followers use
  v3 with their replica id to truncate (KIP-101/279); consumers use v2 to detect truncation (KIP-320).
* ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46): executed by the
  active controller as controller events; other brokers answer NOT_CONTROLLER so clients retry at the
  controller named in Metadata. The control plane answers them (a single node: nothing to elect or move).

ACLs: the controller's requests need CLUSTER_ACTION, elections and reassignments ALTER on the cluster
and listing reassignments DESCRIBE (CLUSTER_AUTHORIZATION_FAILED); OffsetForLeaderEpoch DESCRIBE on the
topic or CLUSTER_ACTION (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from strom.broker.handlers.authz import Op, Res, allowed_cluster, denied
from strom.broker.handlers.base import RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionReassignmentsResponseReassignablePartitionResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponsePartitionResult,
    ElectLeadersResponseReplicaElectionResult,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponseOngoingPartitionReassignment,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResponseEpochEndOffset,
    OffsetForLeaderEpochResponseOffsetForLeaderTopicResult,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

_CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


@handles(ApiKey.LEADER_AND_ISR)
async def handle_leader_and_isr(ctx: RequestContext, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    if not allowed_cluster(ctx, Op.CLUSTER_ACTION):
        return {"error_code": _CLUSTER_DENIED, "partition_errors": []}
    return await ctx.ports.control.leader_and_isr(req)


@handles(ApiKey.STOP_REPLICA)
async def handle_stop_replica(ctx: RequestContext, req: StopReplicaRequest) -> StopReplicaResponse:
    if not allowed_cluster(ctx, Op.CLUSTER_ACTION):
        return {"error_code": _CLUSTER_DENIED, "partition_errors": []}
    return ctx.ports.control.stop_replica(req)


@handles(ApiKey.UPDATE_METADATA)
async def handle_update_metadata(ctx: RequestContext, req: UpdateMetadataRequest) -> UpdateMetadataResponse:
    if not allowed_cluster(ctx, Op.CLUSTER_ACTION):
        return {"error_code": _CLUSTER_DENIED}
    return {"error_code": int(ctx.ports.control.update_metadata(req))}


@handles(ApiKey.CONTROLLED_SHUTDOWN)
async def handle_controlled_shutdown(
    ctx: RequestContext, req: ControlledShutdownRequest
) -> ControlledShutdownResponse:
    if not allowed_cluster(ctx, Op.CLUSTER_ACTION):
        return {"error_code": _CLUSTER_DENIED, "remaining_partitions": []}
    try:
        remaining = await ctx.ports.control.shutdown_broker(int(req["broker_id"]))
    except KafkaError as exc:
        return {"error_code": int(exc.code), "remaining_partitions": []}
    return {
        "error_code": 0,
        "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining],
    }


# --- OffsetForLeaderEpoch --------------------------------------------------------------------------


def _epoch_end(
    ctx: RequestContext, topic: str, p: OffsetForLeaderEpochRequestOffsetForLeaderPartition
) -> OffsetForLeaderEpochResponseEpochEndOffset:
    index = int(p["partition"])
    out: OffsetForLeaderEpochResponseEpochEndOffset = {
        "error_code": 0,
        "partition": index,
        "leader_epoch": -1,
        "end_offset": -1,
    }
    current = int(p.get("current_leader_epoch", -1))
    try:
        # Kafka: DESCRIBE on the topic, or CLUSTER_ACTION (a follower truncating).
        if denied(ctx, Op.DESCRIBE, Res.TOPIC, topic) and not allowed_cluster(ctx, Op.CLUSTER_ACTION):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        epoch_end = ctx.ports.replica_manager.end_offset_for_epoch(
            topic, index, current, int(p["leader_epoch"])
        )
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
        return out
    out["leader_epoch"], out["end_offset"] = epoch_end
    return out


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def handle_offset_for_leader_epoch(
    ctx: RequestContext, req: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    topics: list[OffsetForLeaderEpochResponseOffsetForLeaderTopicResult] = [
        {"topic": t["topic"], "partitions": [_epoch_end(ctx, t["topic"], p) for p in t["partitions"]]}
        for t in req["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}


# --- ElectLeaders ----------------------------------------------------------------------------------


def _election_results(
    outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]],
) -> list[ElectLeadersResponseReplicaElectionResult]:
    by_topic: dict[str, list[ElectLeadersResponsePartitionResult]] = {}
    for (topic, p), (code, message) in sorted(outcome.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_id": p, "error_code": int(code), "error_message": message}
        )
    return [{"topic": t, "partition_result": r} for t, r in by_topic.items()]


@handles(ApiKey.ELECT_LEADERS)
async def handle_elect_leaders(ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    requested = req.get("topic_partitions")
    partitions = (
        None if requested is None else [(t["topic"], int(p)) for t in requested for p in t["partitions"]]
    )
    election_type = int(req.get("election_type", 0))
    if not allowed_cluster(ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "error_code": _CLUSTER_DENIED, "replica_election_results": []}
    outcome = await ctx.ports.control.elect_leaders(election_type, partitions)
    if partitions is None:  # "all partitions": report only what was elected or failed
        outcome = {tp: r for tp, r in outcome.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "replica_election_results": _election_results(outcome),
    }


# --- Partition reassignment -------------------------------------------------------------------------


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
async def handle_alter_partition_reassignments(
    ctx: RequestContext, req: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    targets = {
        (t["name"], int(p["partition_index"])): (
            None if p["replicas"] is None else [int(b) for b in p["replicas"]]
        )
        for t in req["topics"]
        for p in t["partitions"]
    }
    control = ctx.ports.control
    if not allowed_cluster(ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "error_code": _CLUSTER_DENIED, "error_message": None, "responses": []}
    if not control.controller_active:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "error_message": "this broker is not the controller",
            "responses": [],
        }
    outcome = await control.reassign(targets)
    by_topic: dict[str, list[AlterPartitionReassignmentsResponseReassignablePartitionResponse]] = {}
    for (topic, p), (code, message) in sorted(outcome.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "error_code": int(code), "error_message": message}
        )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS)
async def handle_list_partition_reassignments(
    ctx: RequestContext, req: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    control = ctx.ports.control
    if not allowed_cluster(ctx, Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": _CLUSTER_DENIED, "error_message": None, "topics": []}
    if not control.controller_active:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "error_message": "this broker is not the controller",
            "topics": [],
        }
    found = await control.list_reassignments()
    wanted = req.get("topics")
    wanted_set = (
        None if wanted is None else {(t["name"], int(p)) for t in wanted for p in t["partition_indexes"]}
    )
    by_topic: dict[str, list[ListPartitionReassignmentsResponseOngoingPartitionReassignment]] = {}
    for (topic, p), (replicas, adding, removing) in sorted(found.items()):
        if wanted_set is not None and (topic, p) not in wanted_set:
            continue
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": p,
                "replicas": replicas,
                "adding_replicas": adding,
                "removing_replicas": removing,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
