"""``__transaction_state`` records (Kafka's ``TransactionLogKey`` / ``TransactionLogValue``, version 0).

One record per transactional id and state change; the topic is compacted, so the latest record of
an id is its state. Big-endian, Kafka's non-flexible encoding (strings are an int16 length then
UTF-8)::

    key    version int16 (0) | transactional_id string
    value  version int16 (0)
           producer_id int64 | producer_epoch int16 | transaction_timeout_ms int32
           state int8 (state.py ids)
           partitions: int32 count (-1 = null, written when the state is Empty), each
                       topic string | int32 count | partition int32 ...
           last_update_ms int64 | start_ms int64

A null value (tombstone) means the id expired. Version 1 (flexible, with tagged fields) exists in
Kafka only from transaction.version 1; Strom writes and reads version 0.

The partition of an id is ``abs(hash) % partitions`` where hash is Java's ``String.hashCode`` over
the id's UTF-16 code units with int32 wrap-around, and ``abs(-2**31)`` is 0 (Kafka's ``Utils.abs``),
so a Strom cluster places ids where Kafka would. Pure functions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from strom.transaction.state import TxnState

KEY_VERSION = 0
VALUE_VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state
_TAIL = struct.Struct(">qq")


class TxnRecordError(ValueError):
    """A ``__transaction_state`` record that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_value(value: TxnLogValue) -> bytes:
    out = bytearray(
        _HEAD.pack(VALUE_VERSION, value.producer_id, value.producer_epoch, value.timeout_ms, value.state.id)
    )
    if value.state is TxnState.EMPTY and not value.partitions:
        out += _I32.pack(-1)
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(value.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out += _I32.pack(len(by_topic))
        for topic, partitions in by_topic.items():
            out += _string(topic) + _I32.pack(len(partitions))
            out += b"".join(_I32.pack(p) for p in partitions)
    out += _TAIL.pack(value.last_update_ms, value.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > len(self.data):
            raise TxnRecordError("transaction log record is truncated")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def string(self) -> str:
        (length,) = self.take(_I16)
        if length < 0 or self.pos + length > len(self.data):
            raise TxnRecordError("bad string in transaction log record")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw.decode()


def decode_key(data: bytes) -> str:
    """The transactional id of a key.

    Raises:
        TxnRecordError: malformed, or a version other than 0.
    """
    reader = _Reader(data)
    (version,) = reader.take(_I16)
    if version != KEY_VERSION:
        raise TxnRecordError(f"unknown transaction log key version {version}")
    return reader.string()


def decode_value(data: bytes) -> TxnLogValue:
    """Raises: TxnRecordError: malformed, an unknown state, or a version other than 0."""
    reader = _Reader(data)
    version, producer_id, epoch, timeout_ms, state_id = reader.take(_HEAD)
    if version != VALUE_VERSION:
        raise TxnRecordError(f"unsupported transaction log value version {version}")
    try:
        state = TxnState(state_id)
    except ValueError as exc:
        raise TxnRecordError(f"unknown transaction state {state_id}") from exc
    (topics,) = reader.take(_I32)
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(topics, 0)):
        topic = reader.string()
        (count,) = reader.take(_I32)
        partitions.update((topic, reader.take(_I32)[0]) for _ in range(max(count, 0)))
    last_update_ms, start_ms = reader.take(_TAIL)
    return TxnLogValue(producer_id, epoch, timeout_ms, state, frozenset(partitions), last_update_ms, start_ms)


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, as a signed int32."""
    h = 0
    units = value.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's placement)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def topic_partitions(pairs: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """``[(topic, [partition, ...])]``, sorted, for responses that list partitions by topic."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(pairs):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())
