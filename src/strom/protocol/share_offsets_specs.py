"""KIP-932's DescribeShareGroupOffsets (90), which the installed specs lack, in spec.py's JSON format.

Admin clients send it to the group's coordinator (FindCoordinator with key type GROUP). Described here
from KIP-932 and Kafka's protocol documentation at version 0, flexible: per group, the topics and
partitions asked for (``Topics`` null: those of the group's subscriptions), and per partition the
share-partition start offset (-1: no state stored), the partition's leader epoch and an error code;
per group an error code.
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


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson]) -> SpecJson:
    return message_json(name, kind, api_key, "0", fields)


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
                                    *_errors(),
                                ],
                            ),
                        ],
                    ),
                    *_errors(),
                ],
            ),
        ],
    ),
]
