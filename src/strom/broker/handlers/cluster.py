"""Cluster APIs: the controller's requests to brokers, leader-epoch queries and the admin election APIs.

Broker-to-broker, never advertised (layouts in protocol/internal_specs.py):
* LeaderAndIsr (4) and StopReplica (5) go to the replica manager; UpdateMetadata (6) replaces the
  metadata cache; ControlledShutdown (7) is answered by the active controller only (NOT_CONTROLLER
  elsewhere). In single-node mode they answer NOT_CONTROLLER-free errors: there is no controller.

Advertised:
* OffsetForLeaderEpoch (23, v2..3): answered by the leader only, from the leader-epoch cache: the largest
  epoch <= the requested one and where it ends (the log end offset for the current epoch). Followers use
  v3 with their replica id to truncate (KIP-101/279); consumers use v2 to detect truncation (KIP-320).
* ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46): executed by the
  active controller as controller events; other brokers answer NOT_CONTROLLER so clients retry at the
  controller named in Metadata. A single node is trivially balanced: nothing to elect or move.
"""

from __future__ import annotations

from typing import Any

from strom.broker.handlers.base import Body, RequestContext, handles
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError


def _not_in_cluster(ctx: RequestContext) -> bool:
    return ctx.broker.cluster is None


@handles(ApiKey.LEADER_AND_ISR)
async def handle_leader_and_isr(ctx: RequestContext, req: Body) -> Body:
    rm = ctx.broker.replica_manager
    if rm is None:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "partition_errors": []}
    return rm.become_leader_or_follower(req)


@handles(ApiKey.STOP_REPLICA)
async def handle_stop_replica(ctx: RequestContext, req: Body) -> Body:
    rm = ctx.broker.replica_manager
    if rm is None:
        return {"error_code": int(ErrorCode.INVALID_REQUEST), "partition_errors": []}
    return rm.stop_replicas(req)


@handles(ApiKey.UPDATE_METADATA)
async def handle_update_metadata(ctx: RequestContext, req: Body) -> Body:
    cluster = ctx.broker.cluster
    if cluster is None:
        return {"error_code": int(ErrorCode.INVALID_REQUEST)}
    if not cluster.metadata.apply_update_metadata(req):
        return {"error_code": int(ErrorCode.STALE_CONTROLLER_EPOCH)}
    cluster.on_metadata_updated()
    return {"error_code": 0}


@handles(ApiKey.CONTROLLED_SHUTDOWN)
async def handle_controlled_shutdown(ctx: RequestContext, req: Body) -> Body:
    cluster = ctx.broker.cluster
    if cluster is None or not cluster.controller.active:
        return {"error_code": int(ErrorCode.NOT_CONTROLLER), "remaining_partitions": []}
    broker_id = int(req["broker_id"])
    remaining = await cluster.controller.call(lambda: cluster.controller.controlled_shutdown(broker_id))
    return {
        "error_code": 0,
        "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining],
    }


# --- OffsetForLeaderEpoch --------------------------------------------------------------------------


def _epoch_end(ctx: RequestContext, topic: str, p: dict[str, Any]) -> dict[str, Any]:
    index = int(p["partition"])
    out = {"error_code": 0, "partition": index, "leader_epoch": -1, "end_offset": -1}
    current = int(p.get("current_leader_epoch", -1))
    try:
        rm = ctx.broker.replica_manager
        if rm is not None:
            plog = rm.leader_partition(topic, index, current).log
        else:
            if current > 0:
                raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)
            plog = ctx.broker.partition_log(topic, index)
    except KafkaError as exc:
        out["error_code"] = int(exc.code)
        return out
    out["leader_epoch"], out["end_offset"] = plog.leader_epoch_end_offset(int(p["leader_epoch"]))
    if rm is None and int(p["leader_epoch"]) == 0 and not plog.leader_epoch_cache.entries:
        # A single node leads at epoch 0 from offset 0; Kafka records a leader's epoch when it is
        # elected, so an empty partition answers (0, log end offset), not UNDEFINED.
        out["leader_epoch"], out["end_offset"] = 0, plog.log_end_offset
    return out


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def handle_offset_for_leader_epoch(ctx: RequestContext, req: Body) -> Body:
    topics = [
        {"topic": t["topic"], "partitions": [_epoch_end(ctx, t["topic"], p) for p in t["partitions"]]}
        for t in req["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}


# --- ElectLeaders ----------------------------------------------------------------------------------


def _election_results(
    req: Body, outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]]
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (code, message) in sorted(outcome.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_id": p, "error_code": int(code), "error_message": message}
        )
    return [{"topic": t, "partition_result": r} for t, r in by_topic.items()]


@handles(ApiKey.ELECT_LEADERS)
async def handle_elect_leaders(ctx: RequestContext, req: Body) -> Body:
    requested = req.get("topic_partitions")
    partitions = (
        None if requested is None else [(t["topic"], int(p)) for t in requested for p in t["partitions"]]
    )
    election_type = int(req.get("election_type", 0))
    cluster = ctx.broker.cluster
    if cluster is None:
        single = (
            partitions
            if partitions is not None
            else [
                (name, p) for name, info in ctx.broker.metadata.topics.items() for p in range(info.partitions)
            ]
        )
        known = ctx.broker.metadata.topics
        outcome: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {
            tp: (
                ErrorCode.ELECTION_NOT_NEEDED
                if tp[0] in known and 0 <= tp[1] < known[tp[0]].partitions
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                None,
            )
            for tp in single
        }
    elif not cluster.controller.active:
        # Per partition, as Kafka's (ZK) controller does: v0 has no top-level error code, so a
        # top-level NOT_CONTROLLER with no results would read as "nothing to report".
        outcome = dict.fromkeys(partitions or [], (ErrorCode.NOT_CONTROLLER, None))
    else:
        outcome = await cluster.controller.call(
            lambda: cluster.controller.elect_leaders(election_type, partitions)
        )
    if partitions is None:  # "all partitions": report only what was elected or failed
        outcome = {tp: r for tp, r in outcome.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "replica_election_results": _election_results(req, outcome),
    }


# --- Partition reassignment -------------------------------------------------------------------------


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
async def handle_alter_partition_reassignments(ctx: RequestContext, req: Body) -> Body:
    cluster = ctx.broker.cluster
    targets = {
        (t["name"], int(p["partition_index"])): (
            None if p["replicas"] is None else [int(b) for b in p["replicas"]]
        )
        for t in req["topics"]
        for p in t["partitions"]
    }
    if cluster is not None and not cluster.controller.active:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "error_message": "this broker is not the controller",
            "responses": [],
        }
    if cluster is None:
        me = ctx.broker.node_id
        known = ctx.broker.metadata.topics
        outcome = {
            tp: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            if tp[0] not in known or not 0 <= tp[1] < known[tp[0]].partitions
            else (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)  # a cancel: nothing ever moves here
            if r is None
            else (ErrorCode.NONE if r == [me] else ErrorCode.INVALID_REPLICA_ASSIGNMENT, None)
            for tp, r in targets.items()
        }
    else:
        outcome = await cluster.controller.call(lambda: cluster.controller.reassign(targets))
    by_topic: dict[str, list[dict[str, Any]]] = {}
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
async def handle_list_partition_reassignments(ctx: RequestContext, req: Body) -> Body:
    cluster = ctx.broker.cluster
    if cluster is not None and not cluster.controller.active:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NOT_CONTROLLER),
            "error_message": "this broker is not the controller",
            "topics": [],
        }
    found = {} if cluster is None else await cluster.controller.call(cluster.controller.list_reassignments)
    wanted = req.get("topics")
    wanted_set = (
        None if wanted is None else {(t["name"], int(p)) for t in wanted for p in t["partition_indexes"]}
    )
    by_topic: dict[str, list[dict[str, Any]]] = {}
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
