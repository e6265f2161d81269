"""The tables' layouts: the record's metadata columns, the modes' columns, the hour partitioning.

Every row carries ``partition`` (int), ``offset`` (long), ``timestamp`` (timestamptz, microseconds;
null for a record without one), ``headers`` (list of key/value structs) and ``key`` (binary). Then
``key_value`` adds ``value`` (binary), ``value_schema_id_prefix`` the value's decoded fields as columns
of their own, and the dead-letter table ``value`` (the raw bytes) and ``reason``. All columns are
optional, so that a later schema version may add fields and rows of earlier ones leave them null. The
tables are partitioned by the hour of ``timestamp``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from strom.protocol.records.record import Record

META_COLUMNS = ("partition", "offset", "timestamp", "headers", "key")

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
META_FIELDS = (
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("headers", pa.list_(HEADER_TYPE)),
    pa.field("key", pa.binary()),
)
KEY_VALUE_SCHEMA = pa.schema([*META_FIELDS, pa.field("value", pa.binary())])
DLQ_SCHEMA = pa.schema([*META_FIELDS, pa.field("value", pa.binary()), pa.field("reason", pa.string())])
PARTITION_SOURCE = "timestamp"
PARTITION_NAME = "timestamp_hour"

Row = dict[str, Any]


def meta_row(partition: int, record: Record) -> Row:
    """The metadata columns of one record (a negative timestamp means none)."""
    return {
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.timestamp * 1000 if record.timestamp >= 0 else None,
        "headers": [{"key": k, "value": v} for k, v in record.headers],
        "key": record.key,
    }
