"""Table rows as the log read's batches: the Kafka columns, and an Avro value struct from the table's
columns by the reader schema (pure Arrow, no Spark session)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from strom.lake.columns import KEY_VALUE_SCHEMA
from strom.spark.lake_rows import avro_defaults, kafka_batch, value_struct
from strom.spark.schema import arrow_schema


def test_kafka_batch_has_the_log_reads_schema() -> None:
    stamp = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    rows = pa.Table.from_pylist(
        [
            {"partition": 2, "offset": 7, "timestamp": stamp, "headers": [], "key": b"k", "value": b"v"},
            {
                "partition": 2,
                "offset": 8,
                "timestamp": None,
                "headers": [{"key": "h", "value": None}],
                "key": None,
                "value": None,
            },
        ],
        schema=KEY_VALUE_SCHEMA,
    )
    batch = kafka_batch(rows, "t", 2, 1, include_headers=True)
    assert batch.schema == arrow_schema(True)
    assert batch.to_pylist() == [
        {
            "key": b"k",
            "value": b"v",
            "topic": "t",
            "partition": 2,
            "offset": 7,
            "timestamp": stamp,
            "timestampType": 1,
            "headers": None,  # no headers reads as null, as from the log
        },
        {
            "key": None,
            "value": None,
            "topic": "t",
            "partition": 2,
            "offset": 8,
            "timestamp": None,
            "timestampType": -1,
            "headers": [{"key": "h", "value": None}],
        },
    ]
    assert kafka_batch(rows, "t", 2, 0, include_headers=False).schema == arrow_schema(False)


def test_value_struct_by_reader_field_names_with_defaults() -> None:
    reader = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "qty", "type": "int", "default": 1},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "added", "type": "string", "default": "none"},
        ],
    }
    data_type = StructType(
        [
            StructField("id", LongType(), False),
            StructField("qty", IntegerType(), False),
            StructField("note", StringType(), True),
            StructField("added", StringType(), False),
        ]
    )
    assert avro_defaults(json.dumps(reader)) == {"qty": 1, "added": "none"}
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),  # narrower in the table: written before a widening
            "qty": pa.array([None, 5], pa.int32()),  # null: a record written before qty existed
            "note": pa.array(["n", None], pa.large_string()),
            "dropped": pa.array([True, False]),  # a column the reader schema does not have
        }
    )
    values = value_struct(rows, data_type, avro_defaults(json.dumps(reader)))
    assert values.type.field("id").type == pa.int64()
    assert values.to_pylist() == [
        {"id": 1, "qty": 1, "note": "n", "added": "none"},
        {"id": 2, "qty": 5, "note": None, "added": "none"},
    ]
