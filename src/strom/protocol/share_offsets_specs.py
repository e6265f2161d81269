"""KIP-932's share-group offset admin APIs, which the installed specs lack, in spec.py's JSON format.

Admin clients send them to the group's coordinator (FindCoordinator with key type GROUP). Described
here from KIP-932 and Kafka's protocol documentation, flexible in every version:

* DescribeShareGroupOffsets (90), v0 and v1: per group, the topics and partitions asked for
  (``Topics`` null: those of the group's subscriptions), and per partition the share-partition start
  offset (-1: no state stored), the partition's leader epoch and an error code; v1 adds ``Lag`` (the
  records not yet done, -1 when unknown). Per group an error code.
* AlterShareGroupOffsets (91), v0: a group and, per topic and partition, the new start offset;
  answered with a group error code and one per partition (each topic with its id).
* DeleteShareGroupOffsets (92), v0: a group and the topics whose share-partition state goes; a
  top-level error code and one per topic (Kafka 4.1's layout: Kafka dropped the
  per-partition results within version 0, so its admin client reads only this one).
"""

from __future__ import annotations

from strom.protocol.spec_json import FieldJson, SpecJson, field_json, message_json

_I32 = "int32"
_I16 = "int16"
_I64 = "int64"


def _f(name: str, type_: str, *, fields: list[FieldJson] | None = None, nullable: bool = False) -> FieldJson:
    return field_json(name, type_, fields=fields, default="null" if nullable else None, nullable=nullable)


def _errors() -> list[FieldJson]:
    return [_f("ErrorCode", _I16), _f("ErrorMessage", "string", nullable=True)]


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson], valid: str = "0") -> SpecJson:
    return message_json(name, kind, api_key, valid, fields)


def _partition_results(prefix: str) -> FieldJson:
    """A response's ``Partitions`` of one topic: the index and its error."""
    return _f("Partitions", f"[]{prefix}Partition", fields=[_f("PartitionIndex", _I32), *_errors()])


def _group_results(prefix: str) -> list[FieldJson]:
    """An Alter or Delete answer: the group's error, then per topic its name, id and partition results."""
    topics = _f(
        "Responses",
        f"[]{prefix}Topic",
        fields=[_f("TopicName", "string"), _f("TopicId", "uuid"), _partition_results(prefix)],
    )
    return [_f("ThrottleTimeMs", _I32), *_errors(), topics]


SHARE_OFFSETS_SPECS: list[SpecJson] = [
    _message(
        "DescribeShareGroupOffsetsRequest",
        "request",
        90,
        [
            _f(
                "Groups",
                "[]DescribeShareGroupOffsetsRequestGroup",
                fields=[
                    _f("GroupId", "string"),
                    _f(
                        "Topics",
                        "[]DescribeShareGroupOffsetsRequestTopic",
                        nullable=True,
                        fields=[_f("TopicName", "string"), _f("Partitions", "[]int32")],
                    ),
                ],
            )
        ],
        "0-1",
    ),
    _message(
        "DescribeShareGroupOffsetsResponse",
        "response",
        90,
        [
            _f("ThrottleTimeMs", _I32),
            _f(
                "Groups",
                "[]DescribeShareGroupOffsetsResponseGroup",
                fields=[
                    _f("GroupId", "string"),
                    _f(
                        "Topics",
                        "[]DescribeShareGroupOffsetsResponseTopic",
                        fields=[
                            _f("TopicName", "string"),
                            _f("TopicId", "uuid"),
                            _f(
                                "Partitions",
                                "[]DescribeShareGroupOffsetsResponsePartition",
                                fields=[
                                    _f("PartitionIndex", _I32),
                                    _f("StartOffset", _I64),
                                    _f("LeaderEpoch", _I32),
                                    field_json("Lag", _I64, "1+", default="-1"),
                                    *_errors(),
                                ],
                            ),
                        ],
                    ),
                    *_errors(),
                ],
            ),
        ],
        "0-1",
    ),
    _message(
        "AlterShareGroupOffsetsRequest",
        "request",
        91,
        [
            _f("GroupId", "string"),
            _f(
                "Topics",
                "[]AlterShareGroupOffsetsRequestTopic",
                fields=[
                    _f("TopicName", "string"),
                    _f(
                        "Partitions",
                        "[]AlterShareGroupOffsetsRequestPartition",
                        fields=[_f("PartitionIndex", _I32), _f("StartOffset", _I64)],
                    ),
                ],
            ),
        ],
    ),
    _message(
        "AlterShareGroupOffsetsResponse",
        "response",
        91,
        _group_results("AlterShareGroupOffsetsResponse"),
    ),
    _message(
        "DeleteShareGroupOffsetsRequest",
        "request",
        92,
        [
            _f("GroupId", "string"),
            _f("Topics", "[]DeleteShareGroupOffsetsRequestTopic", fields=[_f("TopicName", "string")]),
        ],
    ),
    _message(
        "DeleteShareGroupOffsetsResponse",
        "response",
        92,
        [
            _f("ThrottleTimeMs", _I32),
            *_errors(),
            _f(
                "Responses",
                "[]DeleteShareGroupOffsetsResponseTopic",
                fields=[_f("TopicName", "string"), _f("TopicId", "uuid"), *_errors()],
            ),
        ],
    ),
]
