"""Record layout of the `__consumer_offsets` topic, and which partition a group lives in.

Every change to a group is one record in partition ``partition_for(group_id)`` of `__consumer_offsets`,
a compacted topic: the key says *what* (one committed offset, or one group's membership), the value its
latest content, a null value (tombstone) its deletion. Replaying a partition from its log start offset and
keeping the last value per key rebuilds every group it holds; compaction may drop superseded records
without changing the result. The layouts mirror Kafka's own (`OffsetCommitKey` v1, `OffsetCommitValue` v3,
`GroupMetadataKey` v2, `GroupMetadataValue` v3) so that Kafka's tooling would read them the same way.
All integers are big-endian; a string is an int16 length plus UTF-8 (-1 = null); bytes an int32 length
(-1 = null); an array an int32 count.

Keys (the leading int16 is the key version, which also says what kind of record it is)::

    OffsetCommitKey   version=1 | group string | topic string | partition int32
    GroupMetadataKey  version=2 | group string

Values (the leading int16 is the value version; a reader refuses versions it does not know, so a
newer layout is never misread)::

    OffsetCommitValue   version=3 | offset int64 | leader_epoch int32 (-1 unknown) |
                        metadata string | commit_timestamp int64
    GroupMetadataValue  version=3 | protocol_type string | generation int32 |
                        protocol_name nullable string | leader nullable string |
                        current_state_timestamp int64 | members array of:
                            member_id string | group_instance_id nullable string | client_id string |
                            client_host string | rebalance_timeout_ms int32 | session_timeout_ms int32 |
                            subscription bytes | assignment bytes

Key versions 0 (an older OffsetCommitKey with the same layout) and 1 both mean "offset commit", as in
Kafka. Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberRecord",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A `__consumer_offsets` record this code cannot read (corrupt, or a future version)."""


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's `Utils.abs(hashCode) % partitions`."""
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 (Math.abs would leave it negative).
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- keys and values ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue


# --- writing -----------------------------------------------------------------------------------


def _string(out: bytearray, text: str | None) -> None:
    if text is None:
        out += _I16.pack(-1)
        return
    raw = text.encode()
    out += _I16.pack(len(raw))
    out += raw


def _bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(data))
    out += data


def encode_key(key: Key) -> bytes:
    out = bytearray()
    if isinstance(key, OffsetCommitKey):
        out += _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        _string(out, key.group)
        _string(out, key.topic)
        out += _I32.pack(key.partition)
    else:
        out += _I16.pack(GROUP_METADATA_KEY_VERSION)
        _string(out, key.group)
    return bytes(out)


def encode_value(value: Value) -> bytes:
    out = bytearray()
    if isinstance(value, OffsetCommitValue):
        out += _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        out += _I64.pack(value.offset)
        out += _I32.pack(value.leader_epoch)
        _string(out, value.metadata)
        out += _I64.pack(value.commit_timestamp)
        return bytes(out)
    out += _I16.pack(GROUP_METADATA_VALUE_VERSION)
    _string(out, value.protocol_type)
    out += _I32.pack(value.generation)
    _string(out, value.protocol_name)
    _string(out, value.leader)
    out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _string(out, m.member_id)
        _string(out, m.group_instance_id)
        _string(out, m.client_id)
        _string(out, m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        _bytes(out, m.subscription)
        _bytes(out, m.assignment)
    return bytes(out)


# --- reading -----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise RecordFormatError("record truncated")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def _raw(self, length: int) -> bytes:
        if length < 0 or self.pos + length > len(self.data):
            raise RecordFormatError("record truncated")
        raw = self.data[self.pos : self.pos + length]
        self.pos += length
        return raw

    def nullable_string(self) -> str | None:
        length = self.i16()
        if length == -1:
            return None
        try:
            return self._raw(length).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise RecordFormatError("null where a string is required")
        return text

    def bytes_(self) -> bytes:
        length = self.i32()
        return b"" if length == -1 else self._raw(length)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise RecordFormatError(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.i16()
    if version in (0, OFFSET_COMMIT_KEY_VERSION):
        key: Key = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.string())
    else:
        raise RecordFormatError(f"unknown key version {version}")
    r.done()
    return key


def decode_value(key: Key, data: bytes) -> Value:
    """Decode the value stored under ``key`` (which tells what kind of value it is)."""
    r = _Reader(data)
    version = r.i16()
    value: Value
    if isinstance(key, OffsetCommitKey):
        if version != OFFSET_COMMIT_VALUE_VERSION:
            raise RecordFormatError(f"unknown offset commit value version {version}")
        value = OffsetCommitValue(r.i64(), r.i32(), r.string(), r.i64())
    else:
        if version != GROUP_METADATA_VALUE_VERSION:
            raise RecordFormatError(f"unknown group metadata value version {version}")
        value = _group_value(r)
    r.done()
    return value


def _group_value(r: _Reader) -> GroupMetadataValue:
    protocol_type = r.string()
    generation = r.i32()
    protocol_name = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.i64()
    count = r.i32()
    if count < 0 or count > len(r.data):
        raise RecordFormatError(f"bad member count {count}")
    members = tuple(
        MemberRecord(
            member_id=r.string(),
            group_instance_id=r.nullable_string(),
            client_id=r.string(),
            client_host=r.string(),
            rebalance_timeout_ms=r.i32(),
            session_timeout_ms=r.i32(),
            subscription=r.bytes_(),
            assignment=r.bytes_(),
        )
        for _ in range(count)
    )
    return GroupMetadataValue(protocol_type, generation, protocol_name, leader, timestamp, members)
