"""Metadata (key 3): brokers, controller and per-partition leader/replicas/ISR from the topic catalogue.

Topic list semantics: v0 treats an empty list as "all topics"; from v1 null means all and an empty list
means none. Unknown topics are auto-created when both the request (v4+ `allow_auto_topic_creation`) and
`auto.create.topics.enable` allow it. With ACLs on, listing all topics leaves out those the sender may
not DESCRIBE; a named one answers TOPIC_AUTHORIZATION_FAILED, also when auto-creating it needs CREATE
(on the cluster or the topic) that the sender lacks. Authorized operations are the sender's (every
operation without an authorizer) when asked for, else Kafka's "not requested" value
(docs/protocol.md#authorized-operations-sentinel).

Topic ids (KIP-516): every topic entry carries its id from v10; from v12 a requested topic may be
named by its id alone (UNKNOWN_TOPIC_ID for an id no topic has).

Everything comes from the metadata cache (the controller's last UpdateMetadata, or the local control
plane's for a cluster of one): live brokers, controller, and per partition the leader, its leader epoch
(the one stamped in stored batches, docs/protocol.md#leader-epochs), replicas, ISR and offline replicas; a
partition without a leader is LEADER_NOT_AVAILABLE (also right after auto-creation in a cluster). A broker
that has just started answers only once that cache lists the broker itself (`until_listed`): an answer
without brokers makes librdkafka drop every broker it knows.
"""

from __future__ import annotations

from strom.acl.model import CLUSTER_NAME
from strom.broker.control.topic_admin import INTERNAL_TOPICS, validate_topic_name
from strom.broker.handlers.authz import Op, Res, allowed, allowed_cluster, authorized_operations
from strom.broker.handlers.base import HandlerPorts, RequestContext, handles, until_listed
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.topic_info import TopicInfo
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from strom.protocol.uuid_text import ZERO_UUID

AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _cluster_partition(cache: ClusterMetadataStore, topic: str, p: int) -> MetadataResponsePartition:
    meta = cache.partitions.get((topic, p))
    if meta is None or meta.leader < 0:
        return {
            "error_code": int(ErrorCode.LEADER_NOT_AVAILABLE),
            "partition_index": p,
            "leader_id": -1,
            "leader_epoch": -1 if meta is None else meta.leader_epoch,
            "replica_nodes": [] if meta is None else list(meta.replicas),
            "isr_nodes": [] if meta is None else list(meta.isr),
            "offline_replicas": [] if meta is None else list(meta.offline_replicas),
        }
    return {
        "error_code": 0,
        "partition_index": p,
        "leader_id": meta.leader,
        "leader_epoch": meta.leader_epoch,
        "replica_nodes": list(meta.replicas),
        "isr_nodes": list(meta.isr),
        "offline_replicas": list(meta.offline_replicas),
    }


def _topic_entry(cache: ClusterMetadataStore, info: TopicInfo) -> MetadataResponseTopic:
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.name in INTERNAL_TOPICS,
        "partitions": [_cluster_partition(cache, info.name, p) for p in range(info.partitions)],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _error_entry(name: str | None, code: ErrorCode, topic_id: bytes = ZERO_UUID) -> MetadataResponseTopic:
    return {
        "error_code": int(code),
        "name": name,
        "topic_id": topic_id,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _lookup(ports: HandlerPorts, name: str, allow_auto_create: bool) -> MetadataResponseTopic:
    info = ports.metadata.topics.get(name)
    if info is not None:
        return _topic_entry(ports.metadata, info)
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return _error_entry(name, exc.code)
    if allow_auto_create:
        try:
            created = ports.topics.maybe_auto_create(name)
        except KafkaError as exc:
            if exc.code is ErrorCode.TOPIC_ALREADY_EXISTS:
                # Created by an earlier request (or broker) but not yet in this broker's cache: in a
                # cluster the controller's UpdateMetadata follows. Kafka answers LEADER_NOT_AVAILABLE,
                # which clients retry; UNKNOWN_TOPIC_OR_PARTITION would make them give up.
                return _error_entry(name, ErrorCode.LEADER_NOT_AVAILABLE)
            return _error_entry(name, exc.code)
        if created is not None:
            return _topic_entry(ports.metadata, created)
    return _error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _brokers(cache: ClusterMetadataStore, listener: str) -> list[MetadataResponseBroker]:
    """Each live broker at its address on the listener the client is connected to (Kafka's rule: a
    broker without that listener is left out)."""
    out: list[MetadataResponseBroker] = []
    for _, b in sorted(cache.brokers.items()):
        endpoint = b.endpoint(listener)
        if endpoint is not None:
            out.append({"node_id": b.node_id, "host": endpoint[0], "port": endpoint[1], "rack": b.rack})
    return out


def _authorized_lookup(ctx: RequestContext, name: str, allow_auto_create: bool) -> MetadataResponseTopic:
    """A named topic: TOPIC_AUTHORIZATION_FAILED without DESCRIBE; auto-creation needs CREATE too."""
    if ctx.ports.authorizer is None:
        return _lookup(ctx.ports, name, allow_auto_create)
    if not allowed(ctx, Op.DESCRIBE, Res.TOPIC, name):
        return _error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if (
        name not in ctx.ports.metadata.topics
        and allow_auto_create
        and ctx.ports.config.get("auto.create.topics.enable")
    ) and not (allowed_cluster(ctx, Op.CREATE) or allowed(ctx, Op.CREATE, Res.TOPIC, name)):
        return _error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return _lookup(ctx.ports, name, allow_auto_create)


def _lookup_by_id(ctx: RequestContext, topic_id: bytes) -> MetadataResponseTopic:
    """v12+: a topic named by its id (KIP-516), never auto-created; an unknown id (or one the sender
    may not DESCRIBE) is UNKNOWN_TOPIC_ID without a name, as Kafka answers."""
    name = ctx.ports.metadata.topic_name(topic_id)
    if name is None or (ctx.ports.authorizer is not None and not allowed(ctx, Op.DESCRIBE, Res.TOPIC, name)):
        return _error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id)
    return _topic_entry(ctx.ports.metadata, ctx.ports.metadata.topics[name])


@handles(ApiKey.METADATA)
async def handle_metadata(ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
    ports = ctx.ports
    await until_listed(ports)  # never an answer without brokers (base.py)
    requested = req.get("topics")
    all_topics = requested is None or (ctx.api_version == 0 and not requested)
    if all_topics:
        # With ACLs on, topics the sender may not DESCRIBE are silently left out (Kafka's behaviour).
        topics = [
            _topic_entry(ports.metadata, info)
            for name, info in sorted(ports.metadata.topics.items())
            if ports.authorizer is None or allowed(ctx, Op.DESCRIBE, Res.TOPIC, name)
        ]
    else:
        allow = bool(req.get("allow_auto_topic_creation", True)) if ctx.api_version >= 4 else True
        topics = []
        for t in requested or []:
            name, topic_id = t.get("name"), bytes(t.get("topic_id", ZERO_UUID))
            if name is not None:
                topics.append(_authorized_lookup(ctx, name, allow))
            elif topic_id != ZERO_UUID:
                topics.append(_lookup_by_id(ctx, topic_id))
    cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
    # v8+: the bitfields of what the sender may do, when asked for (Kafka's KIP-430; without an
    # authorizer every operation, as Kafka answers). librdkafka's describe_cluster asks Metadata v10.
    if req.get("include_topic_authorized_operations"):
        for entry in topics:
            if entry["error_code"] == 0 and (name := entry["name"]) is not None:
                entry["topic_authorized_operations"] = authorized_operations(ctx, Res.TOPIC, name)
    if req.get("include_cluster_authorized_operations"):
        cluster_ops = authorized_operations(ctx, Res.CLUSTER, CLUSTER_NAME)
    cache = ports.metadata
    return {
        "throttle_time_ms": 0,
        "brokers": _brokers(cache, ctx.listener),
        "cluster_id": ports.cluster_id,
        "controller_id": cache.controller_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_ops,
    }
