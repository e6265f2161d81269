"""KIP-932's share-state APIs the installed specs lack, in the JSON spec format of spec.py.

A share-partition's leader keeps its state durable through the share coordinator (the leader of the
share-partition's ``__share_group_state`` partition) with two broker-to-broker requests, described here
from KIP-932 and Kafka's protocol documentation at version 0, flexible:

* ReadShareGroupState (84): per share-partition (group, topic id, partition, with the reader's leader
  epoch), the stored state: state epoch, start offset (-1: none stored yet) and the state batches
  (``FirstOffset..LastOffset`` with one delivery state, 0 available, 2 acknowledged, 4 archived, and
  one delivery count).
* WriteShareGroupState (85): the same state written by the leader at its leader epoch, answered per
  partition with an error code.
* DeleteShareGroupState (86): per share-partition (group, topic id, partition), remove the stored
  state (a group's offsets deleted, or the group itself), answered per partition with an error code.

Only Strom brokers send them to each other, so they are served and never advertised (``api.INTERNAL``).
"""

from __future__ import annotations

from strom.protocol.spec_json import FieldJson, SpecJson, field_json, message_json

_I32 = "int32"
_I16 = "int16"
_I64 = "int64"


def _f(name: str, type_: str, *, fields: list[FieldJson] | None = None, nullable: bool = False) -> FieldJson:
    return field_json(name, type_, fields=fields, default="null" if nullable else None, nullable=nullable)


def _message(name: str, kind: str, api_key: int, fields: list[FieldJson]) -> SpecJson:
    return message_json(name, kind, api_key, "0", fields)


_STATE_BATCHES = _f(
    "StateBatches",
    "[]StateBatch",
    fields=[
        _f("FirstOffset", _I64),
        _f("LastOffset", _I64),
        _f("DeliveryState", "int8"),
        _f("DeliveryCount", _I16),
    ],
)


def _results(partition_fields: list[FieldJson]) -> FieldJson:
    return _f(
        "Results",
        "[]Result",
        fields=[
            _f("TopicId", "uuid"),
            _f(
                "Partitions",
                "[]PartitionResult",
                fields=[
                    _f("Partition", _I32),
                    _f("ErrorCode", _I16),
                    _f("ErrorMessage", "string", nullable=True),
                    *partition_fields,
                ],
            ),
        ],
    )


SHARE_STATE_SPECS: list[SpecJson] = [
    _message(
        "ReadShareGroupStateRequest",
        "request",
        84,
        [
            _f("GroupId", "string"),
            _f(
                "Topics",
                "[]ReadStateData",
                fields=[
                    _f("TopicId", "uuid"),
                    _f(
                        "Partitions",
                        "[]PartitionData",
                        fields=[_f("Partition", _I32), _f("LeaderEpoch", _I32)],
                    ),
                ],
            ),
        ],
    ),
    _message(
        "ReadShareGroupStateResponse",
        "response",
        84,
        [_results([_f("StateEpoch", _I32), _f("StartOffset", _I64), _STATE_BATCHES])],
    ),
    _message(
        "WriteShareGroupStateRequest",
        "request",
        85,
        [
            _f("GroupId", "string"),
            _f(
                "Topics",
                "[]WriteStateData",
                fields=[
                    _f("TopicId", "uuid"),
                    _f(
                        "Partitions",
                        "[]PartitionData",
                        fields=[
                            _f("Partition", _I32),
                            _f("StateEpoch", _I32),
                            _f("LeaderEpoch", _I32),
                            _f("StartOffset", _I64),
                            _STATE_BATCHES,
                        ],
                    ),
                ],
            ),
        ],
    ),
    _message("WriteShareGroupStateResponse", "response", 85, [_results([])]),
    _message(
        "DeleteShareGroupStateRequest",
        "request",
        86,
        [
            _f("GroupId", "string"),
            _f(
                "Topics",
                "[]DeleteStateData",
                fields=[
                    _f("TopicId", "uuid"),
                    _f("Partitions", "[]PartitionData", fields=[_f("Partition", _I32)]),
                ],
            ),
        ],
    ),
    _message("DeleteShareGroupStateResponse", "response", 86, [_results([])]),
]
