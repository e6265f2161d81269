"""Kafka record batches, magic 2: header access, record encode/decode and compression codecs.

* :mod:`.batch`: the 61-byte batch header, read and patched without touching the records (the
  produce/fetch fast path).
* :mod:`.record`: zigzag varints and the per-record layout.
* :mod:`.compression`: gzip, snappy (raw and xerial), lz4 frame, zstd.
* :mod:`.builder`: whole-batch encode/decode for the log cleaner, internal topics and tests.
"""

from strom.protocol.records.batch import HEADER_SIZE, BatchHeader, RecordValidationError, read_header
from strom.protocol.records.builder import (
    DecodedBatch,
    build_batch,
    decode_batch,
    decode_batches,
    encode_batch,
)
from strom.protocol.records.compression import CompressionError, CompressionType, compress, decompress
from strom.protocol.records.record import (
    Record,
    RecordDecodeError,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_record,
    encode_varint,
    encode_varlong,
)

__all__ = [
    "HEADER_SIZE",
    "BatchHeader",
    "CompressionError",
    "CompressionType",
    "DecodedBatch",
    "Record",
    "RecordDecodeError",
    "RecordValidationError",
    "build_batch",
    "compress",
    "decode_batch",
    "decode_batches",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "decompress",
    "encode_batch",
    "encode_record",
    "encode_varint",
    "encode_varlong",
    "read_header",
]
