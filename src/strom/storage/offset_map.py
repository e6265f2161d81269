"""Record keys for compaction: the cleaner's `OffsetMap` and the walk over a batch's keys.

`OffsetMap` is Kafka's ``SkimpyOffsetMap`` in spirit (key -> offset of the key's latest record in the
dirty section), kept as a plain dict of exact keys with a bound on the number of entries instead of
a fixed buffer of MD5 digests: exact keys cannot collide, and the bound plays the role of
``log.cleaner.dedupe.buffer.size`` (a dirty section with more distinct keys is cleaned in parts).

`iter_record_keys` walks a batch's records reading only each record's offset delta and key, skipping
values and headers, so building the map costs one pass without materialising records.
log_validator.py uses the same walk for the produce-time key check of compacted topics.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader
from strom.protocol.records.compression import CompressionError, decompress
from strom.protocol.records.record import RecordDecodeError, decode_varint, decode_varlong

Buffer = bytes | bytearray | memoryview

# Decompression-bomb guard for the produce-time key check and the cleaner (Kafka has none; 256 MiB is
# far beyond any batch a client may send under max.message.bytes' default).
MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024


class OffsetMap:
    """Key -> latest offset seen, for the dirty section of one log."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("an offset map needs room for at least one key")
        self.max_entries = max_entries
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    def get(self, key: bytes) -> int:
        """The latest offset recorded for ``key``, or -1."""
        return self._offsets.get(key, -1)

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[key] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def room_for(self, keys: Sequence[bytes]) -> bool:
        """Whether adding ``keys`` keeps the map within ``max_entries``."""
        new = sum(1 for key in set(keys) if key not in self._offsets)
        return len(self._offsets) + new <= self.max_entries


def record_payload(batch: Buffer, header: BatchHeader) -> Buffer:
    """The (decompressed) record array of a whole batch starting at ``batch[0]``.

    Raises:
        RecordDecodeError: the records cannot be decompressed.
    """
    view = memoryview(batch)[HEADER_SIZE : header.size]
    if not header.compression:
        return view
    try:
        return decompress(header.compression, view, max_size=MAX_UNCOMPRESSED_BYTES)
    except CompressionError as exc:
        raise RecordDecodeError(f"cannot decompress record batch: {exc}") from exc


def iter_record_keys(payload: Buffer, header: BatchHeader) -> Iterator[tuple[int, bytes | None]]:
    """(offset, key) of each record in a batch's record array (see `record_payload`).

    Raises:
        RecordDecodeError: a record is malformed.
    """
    pos = 0
    end_of_data = len(payload)
    for _ in range(header.records_count):
        length, pos = decode_varint(payload, pos)
        end = pos + length
        if length < 6 or end > end_of_data:
            raise RecordDecodeError(f"record length {length} does not fit the batch")
        _, pos = decode_varlong(payload, pos + 1)  # attributes byte, then the timestamp delta
        offset_delta, pos = decode_varint(payload, pos)
        key_length, pos = decode_varint(payload, pos)
        if key_length < 0:
            yield header.base_offset + offset_delta, None
        elif pos + key_length > end:
            raise RecordDecodeError("record key runs past the end of its record")
        else:
            yield header.base_offset + offset_delta, bytes(payload[pos : pos + key_length])
        pos = end
