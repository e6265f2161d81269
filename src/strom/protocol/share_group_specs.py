"""The KIP-932 share-group APIs the installed specs lack, in the JSON spec format of spec.py.

kafka-python's spec folder has none of ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch
(78) or ShareAcknowledge (79). These descriptions follow KIP-932 and Kafka's protocol documentation at
version 1, the first stable one (v0 was Kafka 4.0's early access, withdrawn in 4.1); librdkafka 2.16's
share consumer sends exactly v1 of 76, 78 and 79. All four are flexible in every version.

* ShareGroupHeartbeat v1: a member joins (epoch 0), heartbeats with its epoch, or leaves (-1); the
  request carries the subscribed topic names only when they changed (null otherwise). The response
  carries the member id and epoch, the heartbeat interval, and the assignment (topic ids and
  partitions) when there is one to give (null otherwise). Unlike the consumer-group heartbeat there is
  no rebalance timeout and no owned partitions: share groups never revoke.
* ShareGroupDescribe v1: groups with their epochs, assignor and members (each member's assignment).
* ShareFetch v1: the member's share session (epoch 0 opens it with the partitions listed, -1 closes
  it, otherwise each request bumps the epoch by one and lists only the partitions to add), record
  limits (``MaxRecords``, ``BatchSize``), and acknowledgements piggy-backed per partition as batches
  ``FirstOffset..LastOffset`` with one type for all, or one type per offset (0 gap, 1 accept,
  2 release, 3 reject). The response carries, per partition, the stored record batches and the
  ``AcquiredRecords`` ranges with their delivery counts, and the lock duration.
* ShareAcknowledge v1: the same acknowledgements without a fetch.
"""

from __future__ import annotations

from strom.protocol.spec_json import FieldJson, SpecJson, field_json, message_json

_I32 = "int32"
_I16 = "int16"
_I64 = "int64"


def _f(
    name: str,
    type_: str,
    *,
    fields: list[FieldJson] | None = None,
    default: str | None = None,
    nullable: bool = False,
) -> FieldJson:
    return field_json(name, type_, "1+", fields=fields, default=default, nullable=nullable)


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson]) -> SpecJson:
    return message_json(name, kind, api_key, "1", fields)


def _error_message() -> FieldJson:
    return _f("ErrorMessage", "string", default="null", nullable=True)


_ACK_BATCHES = _f(
    "AcknowledgementBatches",
    "[]AcknowledgementBatch",
    fields=[_f("FirstOffset", _I64), _f("LastOffset", _I64), _f("AcknowledgeTypes", "[]int8")],
)
_LEADER = _f("CurrentLeader", "LeaderIdAndEpoch", fields=[_f("LeaderId", _I32), _f("LeaderEpoch", _I32)])
_NODE_ENDPOINTS = _f(
    "NodeEndpoints",
    "[]NodeEndpoint",
    fields=[
        _f("NodeId", _I32),
        _f("Host", "string"),
        _f("Port", _I32),
        _f("Rack", "string", default="null", nullable=True),
    ],
)

SHARE_GROUP_SPECS: list[SpecJson] = [
    _message(
        "ShareGroupHeartbeatRequest",
        "request",
        76,
        [
            _f("GroupId", "string"),
            _f("MemberId", "string"),
            _f("MemberEpoch", _I32),
            _f("RackId", "string", default="null", nullable=True),
            _f("SubscribedTopicNames", "[]string", default="null", nullable=True),
        ],
    ),
    _message(
        "ShareGroupHeartbeatResponse",
        "response",
        76,
        [
            _f("ThrottleTimeMs", _I32),
            _f("ErrorCode", _I16),
            _error_message(),
            _f("MemberId", "string", default="null", nullable=True),
            _f("MemberEpoch", _I32),
            _f("HeartbeatIntervalMs", _I32),
            _f(
                "Assignment",
                "Assignment",
                default="null",
                nullable=True,
                fields=[
                    _f(
                        "AssignedTopicPartitions",
                        "[]TopicPartitions",
                        fields=[_f("TopicId", "uuid"), _f("Partitions", "[]int32")],
                    )
                ],
            ),
        ],
    ),
    _message(
        "ShareGroupDescribeRequest",
        "request",
        77,
        [_f("GroupIds", "[]string"), _f("IncludeAuthorizedOperations", "bool")],
    ),
    _message(
        "ShareGroupDescribeResponse",
        "response",
        77,
        [
            _f("ThrottleTimeMs", _I32),
            _f(
                "Groups",
                "[]DescribedGroup",
                fields=[
                    _f("ErrorCode", _I16),
                    _error_message(),
                    _f("GroupId", "string"),
                    _f("GroupState", "string"),
                    _f("GroupEpoch", _I32),
                    _f("AssignmentEpoch", _I32),
                    _f("AssignorName", "string"),
                    _f(
                        "Members",
                        "[]Member",
                        fields=[
                            _f("MemberId", "string"),
                            _f("RackId", "string", default="null", nullable=True),
                            _f("MemberEpoch", _I32),
                            _f("ClientId", "string"),
                            _f("ClientHost", "string"),
                            _f("SubscribedTopicNames", "[]string"),
                            _f(
                                "Assignment",
                                "DescribedAssignment",
                                fields=[
                                    _f(
                                        "TopicPartitions",
                                        "[]DescribedTopicPartitions",
                                        fields=[
                                            _f("TopicId", "uuid"),
                                            _f("TopicName", "string"),
                                            _f("Partitions", "[]int32"),
                                        ],
                                    )
                                ],
                            ),
                        ],
                    ),
                    _f("AuthorizedOperations", _I32, default="-2147483648"),
                ],
            ),
        ],
    ),
    _message(
        "ShareFetchRequest",
        "request",
        78,
        [
            _f("GroupId", "string", default="null", nullable=True),
            _f("MemberId", "string", nullable=True),
            _f("ShareSessionEpoch", _I32),
            _f("MaxWaitMs", _I32),
            _f("MinBytes", _I32),
            _f("MaxBytes", _I32, default="0x7fffffff"),
            _f("MaxRecords", _I32),
            _f("BatchSize", _I32),
            _f(
                "Topics",
                "[]FetchTopic",
                fields=[
                    _f("TopicId", "uuid"),
                    _f("Partitions", "[]FetchPartition", fields=[_f("PartitionIndex", _I32), _ACK_BATCHES]),
                ],
            ),
            _f(
                "ForgottenTopicsData",
                "[]ForgottenTopic",
                fields=[_f("TopicId", "uuid"), _f("Partitions", "[]int32")],
            ),
        ],
    ),
    _message(
        "ShareFetchResponse",
        "response",
        78,
        [
            _f("ThrottleTimeMs", _I32),
            _f("ErrorCode", _I16),
            _error_message(),
            _f("AcquisitionLockTimeoutMs", _I32),
            _f(
                "Responses",
                "[]ShareFetchableTopicResponse",
                fields=[
                    _f("TopicId", "uuid"),
                    _f(
                        "Partitions",
                        "[]PartitionData",
                        fields=[
                            _f("PartitionIndex", _I32),
                            _f("ErrorCode", _I16),
                            _error_message(),
                            _f("AcknowledgeErrorCode", _I16),
                            _f("AcknowledgeErrorMessage", "string", default="null", nullable=True),
                            _LEADER,
                            _f("Records", "records", nullable=True),
                            _f(
                                "AcquiredRecords",
                                "[]AcquiredRecords",
                                fields=[
                                    _f("FirstOffset", _I64),
                                    _f("LastOffset", _I64),
                                    _f("DeliveryCount", _I16),
                                ],
                            ),
                        ],
                    ),
                ],
            ),
            _NODE_ENDPOINTS,
        ],
    ),
    _message(
        "ShareAcknowledgeRequest",
        "request",
        79,
        [
            _f("GroupId", "string", default="null", nullable=True),
            _f("MemberId", "string", nullable=True),
            _f("ShareSessionEpoch", _I32),
            _f(
                "Topics",
                "[]AcknowledgeTopic",
                fields=[
                    _f("TopicId", "uuid"),
                    _f(
                        "Partitions",
                        "[]AcknowledgePartition",
                        fields=[_f("PartitionIndex", _I32), _ACK_BATCHES],
                    ),
                ],
            ),
        ],
    ),
    _message(
        "ShareAcknowledgeResponse",
        "response",
        79,
        [
            _f("ThrottleTimeMs", _I32),
            _f("ErrorCode", _I16),
            _error_message(),
            _f(
                "Responses",
                "[]ShareAcknowledgeTopicResponse",
                fields=[
                    _f("TopicId", "uuid"),
                    _f(
                        "Partitions",
                        "[]PartitionData",
                        fields=[_f("PartitionIndex", _I32), _f("ErrorCode", _I16), _error_message(), _LEADER],
                    ),
                ],
            ),
            _NODE_ENDPOINTS,
        ],
    ),
]
