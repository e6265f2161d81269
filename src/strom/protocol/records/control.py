"""Control batches: the transaction markers a coordinator writes to end a transaction.

A control batch (Kafka's ``EndTransactionMarker`` and ``ControlRecordType``) is a v2 batch with
attributes bits 4 (transactional) and 5 (control) set, uncompressed, carrying the transaction's
producer id and the marker's producer epoch, base_sequence -1 and exactly one record::

    record key    version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)
    record value  version int16 (0) | coordinator_epoch int32

librdkafka refuses a control key whose size is not 4, so the key is exactly those two fields. The
coordinator epoch is the leader epoch of the ``__transaction_state`` partition the coordinator owns;
a partition refuses a marker from an older coordinator (TRANSACTION_COORDINATOR_FENCED).

Other control types (2 LEADER_CHANGE and above, KRaft's) never occur in Strom's logs; `read_marker`
reports them as None so that callers skip them, as Kafka's readers skip unknown control records.
Reading a marker decodes the one small record of a control batch, never a data batch's records.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader
from strom.protocol.records.builder import build_batch
from strom.protocol.records.record import RecordDecodeError, decode_records

Buffer = bytes | bytearray | memoryview

CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """What a COMMIT or ABORT control record says."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type is ControlType.COMMIT


def encode_key(control_type: ControlType) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def encode_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTxnMarker,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding ``marker`` for the producer's transaction."""
    record = (encode_key(marker.control_type), encode_value(marker.coordinator_epoch), (), timestamp_ms)
    return build_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def parse_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker | None:
    """The marker in a control record's key and value; None for another control type.

    Raises:
        RecordDecodeError: a key shorter than 4 bytes or a marker value shorter than 6.
    """
    if key is None or len(key) < _KEY.size:
        raise RecordDecodeError("control record key shorter than 4 bytes")
    _, type_id = _KEY.unpack_from(key)
    if type_id not in (ControlType.ABORT, ControlType.COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise RecordDecodeError("transaction marker value shorter than 6 bytes")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTxnMarker(ControlType(type_id), coordinator_epoch)


def read_marker(batch: Buffer, header: BatchHeader) -> EndTxnMarker | None:
    """The marker of the control batch ``batch`` (whole, starting at its header); None if not a marker.

    Raises:
        RecordDecodeError: the batch's one record cannot be decoded or is not a valid marker.
    """
    if not header.is_control or header.records_count < 1 or header.compression:
        raise RecordDecodeError("not an uncompressed control batch")
    view = batch if isinstance(batch, memoryview) else memoryview(batch)
    records = decode_records(
        view[HEADER_SIZE : header.size], header.records_count, header.base_offset, header.base_timestamp
    )
    return parse_marker(records[0].key, records[0].value)
