"""A share-partition's durable state (KIP-932): what the share coordinator keeps in `__share_group_state`.

Theory of operation. A share-partition's leader keeps its `SharePartition` in memory
(`strom.coordinator.share.partition`); what must outlive the leader is written to the share
coordinator, the leader of the share-partition's `__share_group_state` partition
(``state_partition``: Kafka's ``abs(hash("group:topicId:partition")) % partitions``). The durable form
is a `ShareState`:

* the **start offset** (every record below it is done; -1 in a read answer: nothing stored yet);
* the **state epoch** (bumped when the state is reset, e.g. by an offsets reset) and the **leader
  epoch** of the leader that wrote it: a write at an older leader epoch than the stored one is refused
  with FENCED_LEADER_EPOCH, so a deposed leader cannot overwrite its successor's state;
* **state batches**: runs of consecutive in-flight offsets with one delivery state and one delivery
  count. Only three delivery states are durable, as in Kafka: AVAILABLE (0), ACKNOWLEDGED (2) and
  ARCHIVED (4). A record ACQUIRED at the time of the write is written AVAILABLE with its delivery
  count: a new leader hands it out again (the lock of a leader that is gone means nothing), counting
  that delivery.

`state_of` turns a `SharePartition` into its `ShareState`; `restore` rebuilds a `SharePartition` from
one (offsets between the start offset and the last batch that no batch covers are done: the log
skipped them). A write carries the whole in-flight window (Strom's leaders send it all), so the stored
state is replaced, never merged.

Records: each write is one ``ShareSnapshot`` record (Kafka's record type 0 of `__share_group_state`),
keyed by (group, topic id, partition), so compaction keeps the last state of each share-partition;
a tombstone deletes it. Layouts follow the `__consumer_offsets` records' style
(`strom.coordinator.records`): key = int16 version 0, group (int16-length string), topic id (16 raw
bytes), partition (int32); value = int16 version 0, state epoch (int32), leader epoch (int32), start
offset (int64), then an int32 count of batches, each first offset (int64), last offset (int64),
delivery state (int8), delivery count (int16). Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol

from strom.coordinator.records import RecordFormatError, _Reader, _string, partition_for
from strom.coordinator.share.partition import InFlight, RecordState, SharePartition
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import WriteShareGroupStateRequestStateBatch
from strom.protocol.uuid_text import uuid_text

__all__ = [
    "NO_START_OFFSET",
    "DeliveryState",
    "SharePersister",
    "ShareState",
    "StateBatch",
    "StateKey",
    "batches_from_wire",
    "batches_to_wire",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "lag",
    "restore",
    "state_of",
    "state_partition",
    "written_state",
]

SHARE_SNAPSHOT_KEY = 0  # Kafka's record type of a ShareSnapshot in __share_group_state
VALUE_VERSION = 0
NO_START_OFFSET = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BATCH = struct.Struct(">qqbh")


class DeliveryState(IntEnum):
    """The durable states of an in-flight record (the wire's and the records' codes)."""

    AVAILABLE = 0
    ACKNOWLEDGED = 2
    ARCHIVED = 4


_DURABLE = {
    RecordState.AVAILABLE: DeliveryState.AVAILABLE,
    RecordState.ACQUIRED: DeliveryState.AVAILABLE,  # a lock does not outlive its leader
    RecordState.ACKNOWLEDGED: DeliveryState.ACKNOWLEDGED,
    RecordState.ARCHIVED: DeliveryState.ARCHIVED,
}
_IN_MEMORY = {
    DeliveryState.AVAILABLE: RecordState.AVAILABLE,
    DeliveryState.ACKNOWLEDGED: RecordState.ACKNOWLEDGED,
    DeliveryState.ARCHIVED: RecordState.ARCHIVED,
}


@dataclass(frozen=True, slots=True)
class StateKey:
    group_id: str
    topic_id: bytes
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's share coordinator key: ``group:topicId:partition``, the topic id in its text form."""
        return f"{self.group_id}:{uuid_text(self.topic_id)}:{self.partition}"


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: DeliveryState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...] = ()


class SharePersister(Protocol):
    """Where a share-partition's leader reads and writes its durable state (Kafka's ``Persister``).

    ``deadline_ms`` (on the broker clock's monotonic time line) is the asking request's: a share
    coordinator that is moving or loading is retried until then, never after (None: the persister's
    own bound)."""

    async def read(
        self, group_id: str, topic: str, partition: int, leader_epoch: int, deadline_ms: int | None = None
    ) -> ShareState | None:
        """The stored state (None: nothing stored yet).

        Raises:
            KafkaError: the share coordinator could not be reached or refused.
        """

    async def write(
        self, group_id: str, topic: str, partition: int, state: ShareState, deadline_ms: int | None = None
    ) -> ErrorCode:
        """Store ``state``; NONE once it is durable, else the error."""

    async def delete(self, group_id: str, topic: str, partition: int) -> ErrorCode:
        """Remove the stored state (an admin deleted the group's offsets); NONE once durable."""

    async def delete_group(self, group_id: str) -> tuple[ErrorCode, int]:
        """Remove every stored state of the group (an admin deleted it): the first error (NONE when
        every share coordinator answered) and how many states were removed."""


def state_partition(key: StateKey, num_partitions: int) -> int:
    """The `__share_group_state` partition of a share-partition."""
    return partition_for(key.coordinator_key(), num_partitions)


# --- SharePartition <-> ShareState -------------------------------------------------------------


def state_of(share: SharePartition, state_epoch: int, leader_epoch: int) -> ShareState:
    """The durable form of ``share``: its start offset and its in-flight records as state batches."""
    batches: list[StateBatch] = []
    for offset in sorted(share.in_flight):
        record = share.in_flight[offset]
        state = _DURABLE[record.state]
        last = batches[-1] if batches else None
        if (
            last is not None
            and last.last_offset == offset - 1
            and last.delivery_state is state
            and last.delivery_count == record.delivery_count
        ):
            batches[-1] = StateBatch(last.first_offset, offset, state, record.delivery_count)
        else:
            batches.append(StateBatch(offset, offset, state, record.delivery_count))
    return ShareState(state_epoch, leader_epoch, share.start_offset, tuple(batches))


def restore(state: ShareState, delivery_count_limit: int) -> SharePartition:
    """The `SharePartition` a new leader carries on with: nothing acquired, every undecided record
    AVAILABLE with its delivery count."""
    in_flight: dict[int, InFlight] = {}
    end = state.start_offset
    for batch in state.batches:
        for offset in range(max(batch.first_offset, state.start_offset), batch.last_offset + 1):
            in_flight[offset] = InFlight(_IN_MEMORY[batch.delivery_state], batch.delivery_count)
        end = max(end, batch.last_offset + 1)
    share = SharePartition(state.start_offset, delivery_count_limit, end, in_flight)
    share.reset_start(state.start_offset)  # drops the done records at the head, if any
    return share


def lag(state: ShareState, high_watermark: int) -> int:
    """The records of the share-partition not yet done: from the start offset to the high watermark,
    less those its batches hold ACKNOWLEDGED or ARCHIVED (DescribeShareGroupOffsets v1's ``Lag``)."""
    done = 0
    for b in state.batches:
        if b.delivery_state is not DeliveryState.AVAILABLE:
            done += max(min(b.last_offset + 1, high_watermark) - max(b.first_offset, state.start_offset), 0)
    return max(high_watermark - state.start_offset - done, 0)


def written_state(current: ShareState | None, write: ShareState) -> tuple[ShareState | None, ErrorCode]:
    """What the share coordinator stores for ``write`` given what it has: the write itself (its start
    offset -1 keeps the stored one), or the stored state and the refusal."""
    if current is not None:
        if write.leader_epoch < current.leader_epoch:
            return current, ErrorCode.FENCED_LEADER_EPOCH
        if write.state_epoch < current.state_epoch:
            return current, ErrorCode.FENCED_STATE_EPOCH
    start = write.start_offset
    if start < 0:
        if current is None:
            return current, ErrorCode.INVALID_REQUEST
        start = current.start_offset
    batches = tuple(b for b in write.batches if b.last_offset >= start)
    return ShareState(write.state_epoch, write.leader_epoch, start, batches), ErrorCode.NONE


# --- records -----------------------------------------------------------------------------------


def encode_key(key: StateKey) -> bytes:
    out = bytearray(_I16.pack(SHARE_SNAPSHOT_KEY))
    _string(out, key.group_id)
    out += key.topic_id
    out += _I32.pack(key.partition)
    return bytes(out)


def decode_key(data: bytes) -> StateKey:
    """Raises: RecordFormatError (a record type this code does not know, or a corrupt key)."""
    reader = _Reader(data)
    version = reader.i16()
    if version != SHARE_SNAPSHOT_KEY:
        raise RecordFormatError(f"unknown __share_group_state record type {version}")
    group_id = reader.string()
    topic_id = reader._raw(16)
    return StateKey(group_id, topic_id, reader.i32())


def encode_value(state: ShareState) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I32.pack(state.state_epoch)
    out += _I32.pack(state.leader_epoch)
    out += _I64.pack(state.start_offset)
    out += _I32.pack(len(state.batches))
    for b in state.batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count)
    return bytes(out)


def decode_value(data: bytes) -> ShareState:
    """Raises: RecordFormatError (an unknown value version, a bad delivery state, a corrupt value)."""
    reader = _Reader(data)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown ShareSnapshot value version {version}")
    state_epoch, leader_epoch, start = reader.i32(), reader.i32(), reader.i64()
    batches: list[StateBatch] = []
    for _ in range(reader.i32()):
        first, last, code, count = _BATCH.unpack(reader._raw(_BATCH.size))
        try:
            delivery = DeliveryState(code)
        except ValueError:
            raise RecordFormatError(f"unknown delivery state {code}") from None
        batches.append(StateBatch(first, last, delivery, count))
    return ShareState(state_epoch, leader_epoch, start, tuple(batches))


def batches_from_wire(raw: Iterable[Mapping[str, Any]]) -> tuple[StateBatch, ...]:
    """The ``StateBatches`` of a request or response (``first_offset``, ``last_offset``,
    ``delivery_state``, ``delivery_count``).

    Raises:
        ValueError: an unknown delivery state.
    """
    return tuple(
        StateBatch(
            int(b["first_offset"]),
            int(b["last_offset"]),
            DeliveryState(int(b["delivery_state"])),
            int(b["delivery_count"]),
        )
        for b in raw
    )


def batches_to_wire(batches: Iterable[StateBatch]) -> list[WriteShareGroupStateRequestStateBatch]:
    """``StateBatches`` as ReadShareGroupState and WriteShareGroupState carry them."""
    return [
        {
            "first_offset": b.first_offset,
            "last_offset": b.last_offset,
            "delivery_state": int(b.delivery_state),
            "delivery_count": b.delivery_count,
        }
        for b in batches
    ]
