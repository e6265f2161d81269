"""One block of an Avro object container file, built in memory around bodies cut out of Kafka records.

Both Avro decoders of the connector -- fastavro's block reader (`avro_codec`) and polars' native reader
(`avro_native`) -- read a batch's Confluent wire-format bodies (datums with no framing of their own)
by wrapping them, concatenated, into one block of a container file (Avro specification, "Object
Container Files")::

    header  "Obj" 0x01, the metadata map (avro.schema = the writer schema, avro.codec = null),
            a 16-byte sync marker
    block   record count (long), size in bytes of the data (long), the data, the header's sync marker

Avro's long is zig-zag encoded, then written as a little-endian base-128 varint. The header is built
once per writer schema (`header`); `block` frames each batch's data with it.
"""

from __future__ import annotations

import io

from fastavro import writer as fastavro_writer
from fastavro.types import Schema

SYNC_SIZE = 16  # the sync marker that ends the header and every block


def zigzag(n: int) -> bytes:
    """Avro's long encoding of `n`: zig-zag, then little-endian base-128 varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def header(parsed_schema: Schema) -> bytes:
    """A container file's header for `parsed_schema` (fastavro's parsed form), its sync marker last."""
    out = io.BytesIO()
    fastavro_writer(out, parsed_schema, [])
    return out.getvalue()


def block(file_header: bytes, count: int, data: bytes | memoryview) -> bytes:
    """`file_header` and one block of `count` records whose bodies are concatenated in `data`."""
    return b"".join((file_header, zigzag(count), zigzag(len(data)), data, file_header[-SYNC_SIZE:]))
