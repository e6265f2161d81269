"""The fixed schema of the `strom` source, identical to Spark's Kafka source, in Spark and Arrow forms.

Column order and types: key binary, value binary, topic string, partition int, offset bigint, timestamp
timestamp, timestampType int, and -- only with `includeHeaders=true` -- headers
array<struct<key string, value binary>>. All columns are nullable, as in Spark (a tombstone has a null
value; a record without headers has null headers). Timestamps are Kafka's epoch milliseconds, carried as
Arrow microseconds in UTC, which is how Spark stores `TimestampType`.
"""

from __future__ import annotations

import pyarrow as pa

KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]


def schema_ddl(include_headers: bool) -> str:
    """Spark DDL of the read schema."""
    return f"{KAFKA_SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else KAFKA_SCHEMA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Arrow schema of the record batches handed to Spark."""
    fields = [*_BASE_FIELDS, pa.field("headers", _HEADER_TYPE)] if include_headers else _BASE_FIELDS
    return pa.schema(fields)
