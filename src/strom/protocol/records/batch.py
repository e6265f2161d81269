"""Record batch v2 (magic 2) header: read, validate and patch without decoding records.

On-the-wire and on-disk layout of one batch (big-endian; Kafka's ``DefaultRecordBatch``)::

    offset size field
     0      8   base_offset i64            written 0 by producers, assigned by the broker (not in CRC)
     8      4   batch_length i32           bytes after this field, i.e. total size - 12
    12      4   partition_leader_epoch i32 stamped by the leader (not in CRC)
    16      1   magic i8                   2 (legacy message sets keep magic at the same position)
    17      4   crc u32                    CRC-32C over bytes 21 .. end of batch
    21      2   attributes i16             0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23      4   last_offset_delta i32
    27      8   base_timestamp i64
    35      8   max_timestamp i64          the append time when bit 3 (LogAppendTime) is set
    43      8   producer_id i64
    51      2   producer_epoch i16
    53      4   base_sequence i32
    57      4   records_count i32
    61      ... records (one compressed blob when the codec is not 0)

Everything here works on ``bytes``/``bytearray``/``memoryview`` and never looks past byte 61 except
to compute the CRC, so the broker's produce and fetch paths stay free of per-record work.
Exception contract: malformed input raises only :class:`RecordValidationError`.

This module is the only place that knows the byte positions above: storage, the produce handler and
the batch builder read and patch headers through its functions (`read_header`, `peek_offsets`,
`uses_codec`, `stamp_offsets`, `set_log_append_time`, `pack_header`, `seal_crc`), each one
precompiled ``struct`` call so that the hot paths pay no more than inline code would. The produce
path's common case (a partition's payload is one batch) is `single_client_batch` and `stamp_batch`:
one unpack of the header into a tuple, every check of `validate_client_batches`, no header object.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

from strom.protocol.errors import ErrorCode, KafkaError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the part of a batch not counted by batch_length
MAGIC_V2 = 2
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
# base_offset, batch_length, then skip to last_offset_delta (byte 23): what a fetch needs per batch
_OFFSETS = struct.Struct(">qi11xi")
# base_offset, batch_length, partition_leader_epoch: the fields the leader stamps on append
_STAMP = struct.Struct(">qii")
# batch_length (byte 8), then skip to attributes (byte 21)
_LENGTH_AND_ATTRIBUTES = struct.Struct(">8xi9xh")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")

_BATCH_LENGTH_POS = 8
_LEADER_EPOCH_POS = 12
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35

Buffer = bytes | bytearray | memoryview
# A header's fields in wire order, as one unpack returns them (indexes: 1 batch_length, 3 magic, 4 crc,
# 5 attributes, 6 last_offset_delta, 8 max_timestamp, 9 producer_id, 11 base_sequence, 12 records_count).
HeaderFields = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]

assert _HEADER.size == HEADER_SIZE
assert _OFFSETS.size == 27 and _LENGTH_AND_ATTRIBUTES.size == _ATTRIBUTES_POS + 2


class RecordValidationError(KafkaError):
    """A batch failed a header, size or CRC check; ``code`` is the error Kafka would return."""


class BatchFields:
    """What every view of a v2 batch derives from its header fields (a mixin: no state of its own).

    Shared by `BatchHeader` (header only, produce/fetch paths) and the decoded batch of
    `strom.protocol.records.builder` (header plus records, cleaner and coordinators).
    """

    __slots__ = ()

    base_offset: int
    batch_length: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    base_sequence: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The compaction delete horizon, when attributes bit 6 says base_timestamp holds one."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from INT32_MAX to 0 (Kafka's ``incrementSequence``)."""
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


@dataclass(frozen=True, slots=True)
class BatchHeader(BatchFields):
    """The fixed 61-byte header of one v2 record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int


# A frozen dataclass's generated __init__ costs about twice as much as setting the slots directly, and
# the produce path builds one header per batch, so headers are built through the slot descriptors.
_new = object.__new__
(
    _set_base_offset,
    _set_batch_length,
    _set_partition_leader_epoch,
    _set_magic,
    _set_crc,
    _set_attributes,
    _set_last_offset_delta,
    _set_base_timestamp,
    _set_max_timestamp,
    _set_producer_id,
    _set_producer_epoch,
    _set_base_sequence,
    _set_records_count,
) = (BatchHeader.__dict__[name].__set__ for name in BatchHeader.__dataclass_fields__)


def _unpack_header(buf: Buffer, pos: int) -> BatchHeader:
    return header_of(_HEADER.unpack_from(buf, pos))


def header_of(v: HeaderFields) -> BatchHeader:
    """The `BatchHeader` of fields unpacked in wire order (as `single_client_batch` returns them)."""
    h: BatchHeader = _new(BatchHeader)
    _set_base_offset(h, v[0])
    _set_batch_length(h, v[1])
    _set_partition_leader_epoch(h, v[2])
    _set_magic(h, v[3])
    _set_crc(h, v[4])
    _set_attributes(h, v[5])
    _set_last_offset_delta(h, v[6])
    _set_base_timestamp(h, v[7])
    _set_max_timestamp(h, v[8])
    _set_producer_id(h, v[9])
    _set_producer_epoch(h, v[10])
    _set_base_sequence(h, v[11])
    _set_records_count(h, v[12])
    return h


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos``.

    Raises:
        RecordValidationError: CORRUPT_MESSAGE if fewer than 61 bytes remain, the length field is
            below the header size, or the magic is not 2.
    """
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, "record batch header is truncated")
    header = _unpack_header(buf, pos)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise RecordValidationError(
            ErrorCode.CORRUPT_MESSAGE, f"record batch length {header.batch_length} is below the header size"
        )
    if header.magic != MAGIC_V2:
        raise RecordValidationError(
            ErrorCode.CORRUPT_MESSAGE, f"unsupported record batch magic {header.magic}"
        )
    return header


def iter_headers(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch; stop quietly at a trailing partial batch.

    Raises:
        RecordValidationError: a complete-looking header is malformed (see :func:`read_header`).
    """
    pos = 0
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            return
        yield pos, header
        pos += size


def compute_crc(buf: Buffer, pos: int, size: int) -> int:
    """CRC-32C of the CRC-covered part (attributes .. end) of the batch at ``pos`` of ``size`` bytes."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return int(_crc32c.crc32c(view[pos + _ATTRIBUTES_POS : pos + size]))


def crc_ok(buf: Buffer, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC matches the batch bytes (which must all be present)."""
    if len(buf) - pos < header.size:
        return False
    return compute_crc(buf, pos, header.size) == header.crc


def peek_offsets(buf: Buffer, pos: int) -> tuple[int, int, int]:
    """``(base_offset, batch_length, last_offset_delta)`` of the batch at ``pos``, unchecked.

    For stored batches that were validated on the way in (the fetch path): one unpack, no object.
    The caller guarantees at least `HEADER_SIZE` bytes at ``pos``.
    """
    base_offset, batch_length, last_offset_delta = _OFFSETS.unpack_from(buf, pos)
    return base_offset, batch_length, last_offset_delta


def uses_codec(records: Buffer | None, codec: int) -> bool:
    """Whether any batch header in ``records`` names compression ``codec`` (attributes bits 0-2).

    Reads only each header's length and attributes; stops quietly at a short or malformed tail, which
    validation reports later.
    """
    if records is None:
        return False
    pos, end = 0, len(records)
    while end - pos >= HEADER_SIZE:
        batch_length, attributes = _LENGTH_AND_ATTRIBUTES.unpack_from(records, pos)
        if attributes & COMPRESSION_MASK == codec:
            return True
        if batch_length <= 0:
            return False
        pos += batch_length + LOG_OVERHEAD
    return False


def has_attribute(records: Buffer | None, bit: int) -> bool:
    """Whether any batch header in ``records`` has attributes ``bit`` set (e.g. TRANSACTIONAL_BIT);
    reads headers only, like `uses_codec`."""
    if records is None:
        return False
    pos, end = 0, len(records)
    while end - pos >= HEADER_SIZE:
        batch_length, attributes = _LENGTH_AND_ATTRIBUTES.unpack_from(records, pos)
        if attributes & bit:
            return True
        if batch_length <= 0:
            return False
        pos += batch_length + LOG_OVERHEAD
    return False


def _magic_error(magic: int) -> RecordValidationError:
    # Legacy formats (v0, v1) are well-formed but not accepted by a v2-only broker; anything else is garbage.
    if magic in (0, 1):
        return RecordValidationError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"message format v{magic} is not supported; use v2"
        )
    return RecordValidationError(ErrorCode.CORRUPT_MESSAGE, f"invalid record batch magic {magic}")


def _check_client_batch(header: BatchHeader) -> None:
    """Kafka's ``LogValidator.validateBatch`` checks for batches that come from a client."""
    if header.is_control:
        raise RecordValidationError(ErrorCode.INVALID_RECORD, "clients must not send control batches")
    if header.records_count <= 0 or header.last_offset_delta + 1 != header.records_count:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD,
            f"last_offset_delta {header.last_offset_delta} does not match "
            f"records_count {header.records_count}",
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD, f"producer id {header.producer_id} sent a batch without a sequence"
        )


def validate_client_batches(buf: Buffer, max_message_bytes: int) -> list[tuple[int, BatchHeader]]:
    """Header-only produce checks; returns ``(position, header)`` per batch.

    Steps 1-2 of docs/protocol.md#produce-checks.

    Raises:
        RecordValidationError: with CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, UNSUPPORTED_FOR_MESSAGE_FORMAT
            or INVALID_RECORD, as Kafka would answer.
    """
    batches: list[tuple[int, BatchHeader]] = []
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, "trailing partial record batch")
        magic = view[pos + _MAGIC_POS]
        if magic != MAGIC_V2:
            raise _magic_error(magic)
        header = read_header(view, pos)
        size = header.batch_length + LOG_OVERHEAD
        if size > max_message_bytes:
            raise RecordValidationError(
                ErrorCode.MESSAGE_TOO_LARGE, f"record batch of {size} bytes exceeds {max_message_bytes}"
            )
        if pos + size > end:
            raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, "record batch length exceeds the payload")
        if _crc32c.crc32c(view[pos + _ATTRIBUTES_POS : pos + size]) != header.crc:
            raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
        if (
            header.attributes & CONTROL_BIT
            or header.records_count <= 0
            or header.last_offset_delta + 1 != header.records_count
            or (header.producer_id >= 0 and header.base_sequence < 0)
        ):
            _check_client_batch(header)  # raises with the precise reason
        batches.append((pos, header))
        pos += size
    if not batches:
        raise RecordValidationError(ErrorCode.CORRUPT_MESSAGE, "no record batches in the payload")
    if len(batches) > 1 and any(h.compression for _, h in batches):
        raise RecordValidationError(
            ErrorCode.INVALID_RECORD, "a compressed payload must hold exactly one record batch"
        )
    return batches


def single_client_batch(view: memoryview, max_message_bytes: int) -> HeaderFields | None:
    """The produce fast path's check: ``view`` holds exactly one batch that passes every check of
    `validate_client_batches`; returns its header fields in wire order (one unpack, no object).

    None in every other case (several batches, or any check failing): the caller then runs
    `validate_client_batches`, which accepts the former and raises the precise error for the latter.
    """
    end = len(view)
    if end < HEADER_SIZE:
        return None
    v: HeaderFields = _HEADER.unpack_from(view, 0)
    batch_length = v[1]
    if (
        batch_length + LOG_OVERHEAD != end
        or v[3] != MAGIC_V2
        or batch_length < MIN_BATCH_LENGTH
        or end > max_message_bytes
        or v[5] & CONTROL_BIT
        or v[12] <= 0
        or v[6] + 1 != v[12]
        or (v[9] >= 0 and v[11] < 0)
        or _crc32c.crc32c(view[_ATTRIBUTES_POS:end]) != v[4]
    ):
        return None
    return v


def stamp_batch(
    buf: bytearray | memoryview, pos: int, batch_length: int, base_offset: int, epoch: int
) -> None:
    """`stamp_offsets` given the batch length instead of the header (the fast path has no header)."""
    _STAMP.pack_into(buf, pos, base_offset, batch_length, epoch)


def stamp_offsets(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, base_offset: int, epoch: int
) -> None:
    """Write the leader's base offset and partition leader epoch into the batch ``header`` read at ``pos``.

    Both fields are outside the CRC, so the CRC stays valid; one pack writes them (the batch length
    between them is rewritten unchanged).
    """
    _STAMP.pack_into(buf, pos, base_offset, header.batch_length, epoch)


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Overwrite the batch's base offset; it is outside the CRC, so the CRC stays valid."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Overwrite the partition leader epoch; it is outside the CRC, so the CRC stays valid."""
    _INT32.pack_into(buf, pos + _LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime with ``timestamp_ms`` as its max timestamp and recompute the CRC."""
    (attributes,) = _INT16.unpack_from(buf, pos + _ATTRIBUTES_POS)
    _INT16.pack_into(buf, pos + _ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_POS, timestamp_ms)
    seal_crc(buf, pos)


def seal_crc(buf: bytearray | memoryview, pos: int = 0) -> None:
    """Recompute and store the CRC of the whole batch at ``pos`` (after changing covered bytes)."""
    (batch_length,) = _INT32.unpack_from(buf, pos + _BATCH_LENGTH_POS)
    _UINT32.pack_into(buf, pos + _CRC_POS, compute_crc(buf, pos, batch_length + LOG_OVERHEAD))


def pack_header(
    out: bytearray | memoryview,
    pos: int,
    *,
    base_offset: int,
    batch_length: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> None:
    """Write a magic-2 header at ``pos`` with a zero CRC; call `seal_crc` once the records follow it.

    Raises:
        struct.error: a field does not fit its width.
    """
    _HEADER.pack_into(
        out,
        pos,
        base_offset,
        batch_length,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
