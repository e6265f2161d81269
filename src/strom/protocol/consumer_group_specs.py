"""The KIP-848 consumer-group APIs the installed specs lack, in the JSON spec format of spec.py.

kafka-python's spec folder has neither ConsumerGroupHeartbeat (68) nor ConsumerGroupDescribe (69).
These descriptions follow KIP-848 and Kafka's protocol documentation (the wire layout is a fact of the
protocol; the names are Kafka's so the generated codec and types read like the rest):

* ConsumerGroupHeartbeat v0-v1, flexible: a member joins (epoch 0), heartbeats with its epoch, or
  leaves (-1, or -2 for a static member); the request carries only what changed since the last
  heartbeat (nulls otherwise). v1 adds ``SubscribedTopicRegex`` (and the client may generate its member
  id). The response carries the member id and epoch, the heartbeat interval, and the assignment (topic
  ids and partitions) when there is one to give.
* ConsumerGroupDescribe v0-v1, flexible: groups with their epochs, assignor and members (current and
  target assignment); v1 adds each member's ``MemberType`` (-1 unknown, 0 classic, 1 consumer).
"""

from __future__ import annotations

from strom.protocol.spec_json import FieldJson, SpecJson, field_json, message_json

_I32 = "int32"


_f = field_json


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson]) -> SpecJson:
    return message_json(name, kind, api_key, "0-1", fields)


def _topic_partitions(named: bool = False) -> list[FieldJson]:
    fields = [_f("TopicId", "uuid")]
    if named:
        fields.append(_f("TopicName", "string"))
    fields.append(_f("Partitions", "[]int32"))
    return fields


_DESCRIBED_ASSIGNMENT = [
    _f("TopicPartitions", "[]DescribedTopicPartitions", fields=_topic_partitions(named=True)),
]

CONSUMER_GROUP_SPECS: list[SpecJson] = [
    _message(
        "ConsumerGroupHeartbeatRequest",
        "request",
        68,
        [
            _f("GroupId", "string"),
            _f("MemberId", "string"),
            _f("MemberEpoch", _I32),
            _f("InstanceId", "string", default="null", nullable=True),
            _f("RackId", "string", default="null", nullable=True),
            _f("RebalanceTimeoutMs", _I32, default="-1"),
            _f("SubscribedTopicNames", "[]string", default="null", nullable=True),
            _f("SubscribedTopicRegex", "string", "1+", default="null", nullable=True),
            _f("ServerAssignor", "string", default="null", nullable=True),
            _f(
                "TopicPartitions",
                "[]TopicPartitions",
                default="null",
                nullable=True,
                fields=_topic_partitions(),
            ),
        ],
    ),
    _message(
        "ConsumerGroupHeartbeatResponse",
        "response",
        68,
        [
            _f("ThrottleTimeMs", _I32),
            _f("ErrorCode", "int16"),
            _f("ErrorMessage", "string", default="null", nullable=True),
            _f("MemberId", "string", default="null", nullable=True),
            _f("MemberEpoch", _I32),
            _f("HeartbeatIntervalMs", _I32),
            _f(
                "Assignment",
                "Assignment",
                default="null",
                nullable=True,
                fields=[_f("TopicPartitions", "[]TopicPartitions", fields=_topic_partitions())],
            ),
        ],
    ),
    _message(
        "ConsumerGroupDescribeRequest",
        "request",
        69,
        [_f("GroupIds", "[]string"), _f("IncludeAuthorizedOperations", "bool")],
    ),
    _message(
        "ConsumerGroupDescribeResponse",
        "response",
        69,
        [
            _f("ThrottleTimeMs", _I32),
            _f(
                "Groups",
                "[]DescribedGroup",
                fields=[
                    _f("ErrorCode", "int16"),
                    _f("ErrorMessage", "string", default="null", nullable=True),
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
                            _f("InstanceId", "string", default="null", nullable=True),
                            _f("RackId", "string", default="null", nullable=True),
                            _f("MemberEpoch", _I32),
                            _f("ClientId", "string"),
                            _f("ClientHost", "string"),
                            _f("SubscribedTopicNames", "[]string"),
                            _f("SubscribedTopicRegex", "string", default="null", nullable=True),
                            _f("Assignment", "DescribedAssignment", fields=_DESCRIBED_ASSIGNMENT),
                            _f("TargetAssignment", "DescribedAssignment", fields=_DESCRIBED_ASSIGNMENT),
                            _f("MemberType", "int8", "1+", default="-1"),
                        ],
                    ),
                    _f("AuthorizedOperations", _I32, default="-2147483648"),
                ],
            ),
        ],
    ),
]
