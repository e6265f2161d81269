"""Strom's own descriptions of the broker-to-broker (controller) APIs, in the JSON spec format of spec.py.

Kafka 4 removed LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) and ControlledShutdown (7) with
ZooKeeper mode, so kafka-python's spec folder has none of them. These are Strom's layouts, written for
Strom's ZooKeeper controller (strom.cluster) and the brokers it drives; only Strom brokers speak them,
one version (0) each, classic (non-flexible) encoding. They are never advertised in ApiVersions.

* LeaderAndIsr: the controller tells the replicas of some partitions who leads, at which leader epoch,
  with which ISR and assignment (plus the znode version, so the leader can later change the ISR by a
  conditional write), and how to reach each leader.
* UpdateMetadata: the cluster view (live brokers, partition states, topic ids). Version 0 always carries
  all of it and the broker replaces its cache. Version 1 adds ``Type`` (KIP-866's numbering: 1
  incremental, 2 full) and ``DeletedTopics``: a *full* request is applied as version 0; an
  *incremental* one carries every live broker but only the partitions that changed since the previous
  request to that broker, and the topics deleted since, and the broker merges it into its cache. The
  controller sends a full one first to every broker (after its election and after each registration).
* StopReplica: stop fetching (and optionally delete) some partitions' replicas on a broker.
* LeaderAndIsr v2 (the request as v1): each partition's answer says where the replica's log ends
  (``LastEpoch``, ``LogEndOffset``) when the partition has no leader, so that the controller can
  elect the longest log among ISR members that all restarted (strom.cluster.election).
* ``BrokerEpoch`` (LeaderAndIsr and StopReplica v1, UpdateMetadata v2; KIP-380): the epoch of the
  target broker's registration the controller knows (the czxid of its ``/brokers/ids`` znode). A
  broker refuses a request meant for an earlier registration (STALE_BROKER_EPOCH), so a restarted
  broker never acts on what a controller decided for the process that ran before it; -1 (the older
  versions) is not checked.
* ControlledShutdown: a stopping broker asks the controller to move its leaderships away first; the
  response lists the partitions it still leads.
"""

from __future__ import annotations

from strom.protocol.spec_json import FieldJson, SpecJson, message_json
from strom.protocol.spec_json import field_json as _f

_I32 = "int32"


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson], valid: str = "0") -> SpecJson:
    return message_json(name, kind, api_key, valid, fields, flexible="none")


_PARTITION_ERROR = [_f("TopicName", "string"), _f("PartitionIndex", _I32), _f("ErrorCode", "int16")]

INTERNAL_SPECS: list[SpecJson] = [
    _message(
        "LeaderAndIsrRequest",
        "request",
        4,
        [
            _f("ControllerId", _I32),
            _f("ControllerEpoch", _I32),
            _f("BrokerEpoch", "int64", versions="1+", default="-1"),
            _f(
                "PartitionStates",
                "[]LeaderAndIsrPartitionState",
                fields=[
                    _f("TopicName", "string"),
                    _f("TopicId", "uuid"),
                    _f("PartitionIndex", _I32),
                    _f("ControllerEpoch", _I32),
                    _f("Leader", _I32),
                    _f("LeaderEpoch", _I32),
                    _f("Isr", "[]int32"),
                    _f("ZkVersion", _I32),
                    _f("Replicas", "[]int32"),
                    _f("AddingReplicas", "[]int32"),
                    _f("RemovingReplicas", "[]int32"),
                    _f("IsNew", "bool"),
                ],
            ),
            _f(
                "LiveLeaders",
                "[]LeaderAndIsrLiveLeader",
                fields=[_f("BrokerId", _I32), _f("HostName", "string"), _f("Port", _I32)],
            ),
        ],
        valid="0-2",
    ),
    _message(
        "LeaderAndIsrResponse",
        "response",
        4,
        [
            _f("ErrorCode", "int16"),
            _f(
                "PartitionErrors",
                "[]LeaderAndIsrPartitionError",
                fields=[
                    *_PARTITION_ERROR,
                    # v2: where the replica's log ends, for a partition without a leader (else -1):
                    # the controller elects the longest log among restarted ISR members.
                    _f("LastEpoch", _I32, versions="2+", default="-1"),
                    _f("LogEndOffset", "int64", versions="2+", default="-1"),
                ],
            ),
        ],
        valid="0-2",
    ),
    _message(
        "StopReplicaRequest",
        "request",
        5,
        [
            _f("ControllerId", _I32),
            _f("ControllerEpoch", _I32),
            _f("BrokerEpoch", "int64", versions="1+", default="-1"),
            _f("DeletePartitions", "bool"),
            _f(
                "Partitions",
                "[]StopReplicaPartition",
                fields=[_f("TopicName", "string"), _f("PartitionIndex", _I32)],
            ),
        ],
        valid="0-1",
    ),
    _message(
        "StopReplicaResponse",
        "response",
        5,
        [
            _f("ErrorCode", "int16"),
            _f("PartitionErrors", "[]StopReplicaPartitionError", fields=_PARTITION_ERROR),
        ],
        valid="0-1",
    ),
    _message(
        "UpdateMetadataRequest",
        "request",
        6,
        [
            _f("ControllerId", _I32),
            _f("ControllerEpoch", _I32),
            _f(
                "Topics",
                "[]UpdateMetadataTopicState",
                fields=[
                    _f("TopicName", "string"),
                    _f("TopicId", "uuid"),
                    _f(
                        "PartitionStates",
                        "[]UpdateMetadataPartitionState",
                        fields=[
                            _f("PartitionIndex", _I32),
                            _f("ControllerEpoch", _I32),
                            _f("Leader", _I32),
                            _f("LeaderEpoch", _I32),
                            _f("Isr", "[]int32"),
                            _f("ZkVersion", _I32),
                            _f("Replicas", "[]int32"),
                            _f("OfflineReplicas", "[]int32"),
                        ],
                    ),
                ],
            ),
            _f(
                "LiveBrokers",
                "[]UpdateMetadataBroker",
                fields=[
                    _f("Id", _I32),
                    _f("Host", "string"),
                    _f("Port", _I32),
                    _f("Rack", "string", nullable=True),
                    _f(
                        "Endpoints",
                        "[]UpdateMetadataEndpoint",
                        fields=[_f("Listener", "string"), _f("Host", "string"), _f("Port", _I32)],
                    ),
                ],
            ),
            _f("Type", "int8", versions="1+", default="2"),
            _f("DeletedTopics", "[]string", versions="1+"),
            _f("BrokerEpoch", "int64", versions="2+", default="-1"),
        ],
        valid="0-2",
    ),
    _message("UpdateMetadataResponse", "response", 6, [_f("ErrorCode", "int16")], valid="0-2"),
    _message(
        "ControlledShutdownRequest",
        "request",
        7,
        [_f("BrokerId", _I32), _f("BrokerEpoch", "int64", default="-1")],
    ),
    _message(
        "ControlledShutdownResponse",
        "response",
        7,
        [
            _f("ErrorCode", "int16"),
            _f(
                "RemainingPartitions",
                "[]RemainingPartition",
                fields=[_f("TopicName", "string"), _f("PartitionIndex", _I32)],
            ),
        ],
    ),
]
