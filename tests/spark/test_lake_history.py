"""One Spark read across an Iceberg topic's table and its log (`strom.iceberg.history`), against a real
broker process that translates topics into its default SQL catalog and a real local SparkSession.

Each test lets the translator commit part of a topic, holds it (a target lag of an hour), deletes the
log's head with DeleteRecords so that only the table has those records, produces more, and reads:
every offset exactly once, values as produced (or as the log read decoded them before the deletion).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

from strom.lake.tables import recorded_offsets
from strom.testing import BrokerProcess
from tests.integration.test_iceberg_protobuf import order_classes
from tests.integration.test_iceberg_topics import (
    JSON_V1,
    JSON_V2,
    PARTITIONS,
    V1,
    V2,
    create_topic,
    produce_avro,
    wait_until,
)
from tests.spark.kafka_helpers import produce
from tests.spark.test_batch import spark_rows
from tests.spark.test_standalone import python_snippet
from tests.spark.test_streaming import flat, run_available_now, stream

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
HOLD_MS = "3600000"  # a target lag of an hour: the translator commits nothing more during a test
COMMIT_MS = "300"


@dataclass
class Lake:
    """A broker translating Iceberg topics, and its catalog's pyiceberg properties."""

    broker: BrokerProcess
    catalog: dict[str, str]

    def offsets(self, topic: str) -> dict[int, int]:
        """Each partition's next offset as the topic's table records it ({} before the first commit)."""
        try:
            table = load_catalog("strom", **self.catalog).load_table(("strom", topic))
        except Exception:  # no catalog (database file) or no table yet
            return {}
        return recorded_offsets(table)

    def options(self) -> dict[str, str]:
        """The Spark source's options of a read across this catalog's tables and the log."""
        catalog = dict(self.catalog)
        out = {
            "strom.iceberg.history": "true",
            "strom.iceberg.catalog.type": catalog.pop("type"),
            "strom.iceberg.catalog.uri": catalog.pop("uri"),
        }
        out.update({f"strom.iceberg.catalog.property.{k}": v for k, v in catalog.items()})
        return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("lake-history") / "data", {"strom.iceberg.translation.interval.ms": "100"}
    )
    proc.start()
    try:
        yield Lake(proc, {"type": "sql", "uri": catalog_uri(proc)})
    finally:
        proc.stop()


def catalog_uri(broker: BrokerProcess) -> str:
    return f"sqlite:///{broker.data_dir / 'logs'}/iceberg/catalog.db"


def end_offsets(broker: BrokerProcess, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)})
    return {tp.partition: f.result(30).offset for tp, f in futures.items()}


def set_target_lag(broker: BrokerProcess, topic: str, lag_ms: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("strom.iceberg.target.lag.ms", lag_ms, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def translate_all_then_hold(lake: Lake, topic: str) -> dict[int, int]:
    """Wait until the table holds everything produced so far, then hold the translator; the seams."""
    ends = end_offsets(lake.broker, topic)
    wait_until(lambda: lake.offsets(topic) == ends, 60, "the table to hold every record")
    set_target_lag(lake.broker, topic, HOLD_MS)
    return lake.offsets(topic)


def delete_head(broker: BrokerProcess, topic: str, before: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in before.items()])
    for future in futures.values():
        assert future.result(30).low_watermark > 0


def log_read(spark: Any, broker: BrokerProcess, topic: str, **options: str) -> Any:
    reader = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
    for key, value in {"subscribe": topic, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def check_key_value_read(spark: Any, lake: Lake, topic: str) -> None:
    """Produce, let the table take it all, delete the log's head, produce more: one batch read across
    table and log has every offset once, with the columns the log read had before the deletion."""
    broker = lake.broker
    create_topic(broker, topic, "key_value")
    first = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(150)]
    produce(broker.bootstrap, topic, first, headers=True)
    seams = translate_all_then_hold(lake, topic)
    before = spark_rows(log_read(spark, broker, topic, includeHeaders="true"))
    delete_head(broker, topic, seams)
    more = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(150, 240)]
    produce(broker.bootstrap, topic, more, headers=True)
    assert log_read(spark, broker, topic).count() == 90  # the head is gone from the log

    rows = spark_rows(log_read(spark, broker, topic, includeHeaders="true", **lake.options()))
    ends = end_offsets(broker, topic)
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        (p, o) for p, end in ends.items() for o in range(end)
    )
    assert sorted(r["value"] for r in rows) == sorted(v for _, v in first + more)
    assert all(r["key"] == r["value"].replace(b"v", b"k") for r in rows)
    # The table's rows read as the log read them before the deletion: every column, headers included.
    assert [r for r in rows if r["offset"] < seams[r["partition"]]] == before
    assert {r["timestampType"] for r in rows} == {0}
    assert any(r["headers"] for r in before) and any(r["headers"] is None for r in before)


def test_batch_read_of_key_value_topic_across_table_and_log(spark: Any, lake: Lake) -> None:
    check_key_value_read(spark, lake, "kv-history")


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy("partition", "offset").collect()]


def check_typed_read(
    spark: Any, lake: Lake, topic: str, produce_tail: Callable[[], None], **typed: str
) -> list[dict[str, Any]]:
    """With the history produced and in the table (held), produce the tail, read the log with the typed
    options, delete the log's head: the read across table and log gives the log read's rows (returned)."""
    broker = lake.broker
    translate_all_then_hold(lake, topic)
    produce_tail()
    assert broker.http_url is not None
    typed = {"schema.registry.url": broker.http_url, "mode": "PERMISSIVE", **typed}
    from_log = rows(log_read(spark, broker, topic, **typed))
    delete_head(broker, topic, lake.offsets(topic))
    assert len(rows(log_read(spark, broker, topic, **typed))) < len(from_log)
    across = rows(log_read(spark, broker, topic, **typed, **lake.options()))
    assert across == from_log
    return across


def test_batch_read_of_avro_topic_decodes_table_rows_as_the_log_read(spark: Any, lake: Lake) -> None:
    topic, broker = "avro-history", lake.broker
    create_topic(broker, topic, "value_schema_id_prefix")
    produce_avro(broker, topic, V1, [{"id": i, "item": f"a{i}"} for i in range(40)])
    # A dead letter between good records: the table's offsets move past it.
    produce(broker.bootstrap, topic, [(b"bad", b"no schema here")], partition=1)
    produce_avro(broker, topic, V2, [{"id": i, "item": f"b{i}", "qty": i % 5} for i in range(40, 80)])
    tail = [{"id": i, "item": f"c{i}", "qty": 9} for i in range(80, 120)]
    across = check_typed_read(
        spark, lake, topic, lambda: produce_avro(broker, topic, V2, tail), valueFormat="avro"
    )
    from_log = across
    assert len(across) == 121
    by_id = {r["value"]["id"]: r["value"] for r in across if r["value"] is not None}
    assert by_id[5] == {"id": 5, "item": "a5", "qty": 1}  # v1 record: v2's default, as Avro resolves it
    assert by_id[42]["qty"] == 2 and by_id[90]["item"] == "c90"
    [bad] = [r for r in across if r["value"] is None]
    assert bad["_corrupt_value"]["bytes"] == b"no schema here"

    # The documented snippets, run as written with this broker's addresses and topic.
    for doc, after in (
        (ROOT / "docs" / "spark.md", "## History from Iceberg tables"),
        (ROOT / "docs" / "iceberg.md", "Spark, through Strom's own source"),
    ):
        script = (
            python_snippet(doc, after)
            .replace("127.0.0.1:9092", broker.bootstrap)
            .replace("http://127.0.0.1:8081", broker.http_url)
            .replace("sqlite:///data/iceberg/catalog.db", catalog_uri(broker))
            .replace('"orders"', f'"{topic}"')
        )
        scope: dict[str, Any] = {"spark": spark}
        exec(compile(script, str(doc), "exec"), scope)  # the documented snippet itself
        assert rows(scope["orders"]) == from_log

    # Without valueFormat, the table's decoded columns cannot be the value's bytes: refused.
    with pytest.raises(Exception, match="needs the option valueFormat"):
        log_read(spark, broker, topic, **lake.options()).count()


def test_batch_read_of_json_schema_and_protobuf_topics_decodes_table_rows_as_the_log_read(
    spark: Any, lake: Lake, tmp_path: Path
) -> None:
    broker = lake.broker
    assert broker.http_url is not None
    registry = SchemaRegistryClient({"url": broker.http_url})
    topic = "json-history"
    create_topic(broker, topic, "value_schema_id_prefix")
    registry.set_compatibility(subject_name=f"{topic}-value", level="NONE")
    first, second = (JSONSerializer(json.dumps(s), registry) for s in (JSON_V1, JSON_V2))
    context = SerializationContext(topic, MessageField.VALUE)
    produce(broker.bootstrap, topic, [(None, first({"id": i, "item": f"a{i}"}, context)) for i in range(30)])
    bad = first({"id": 99, "item": "x"}, context)[:5] + b"{not json"
    produce(broker.bootstrap, topic, [(None, bad)], partition=1)
    where = {"lat": 1.5, "lon": 2.0}
    later = [
        (None, second({"id": i, "item": f"b{i}", "qty": i, "where": where}, context)) for i in range(30, 50)
    ]
    produce(broker.bootstrap, topic, later[:10])  # in the table too: its columns evolve
    tail = later[10:]
    across = check_typed_read(
        spark, lake, topic, lambda: produce(broker.bootstrap, topic, tail), valueFormat="json"
    )
    by_id = {r["value"]["id"]: r["value"] for r in across if r["value"] is not None}
    assert by_id[3] == {"id": 3, "item": "a3", "qty": None, "where": None}
    assert by_id[33] == {"id": 33, "item": "b33", "qty": 33, "where": where}
    assert [r["_corrupt_value"]["bytes"] for r in across if r["value"] is None] == [bad]

    topic = "protobuf-history"
    create_topic(broker, topic, "value_schema_id_prefix")
    order_v1, order_v2 = order_classes(tmp_path)
    context = SerializationContext(topic, MessageField.VALUE)
    to_bytes = ProtobufSerializer(order_v1, registry)
    history = []
    for i in range(30):
        order = order_v1(id=i, card=f"c{i}")  # id 0: a proto3 zero, null in the log read
        order.to.city = "Oslo"
        order.at.seconds = 1_700_000_000 + i
        history.append((None, to_bytes(order, context)))
    to_bytes = ProtobufSerializer(order_v2, registry)
    later = [
        (None, to_bytes(order_v2(id=i, voucher=f"v{i}", items=["tea"], note=f"n{i}"), context))
        for i in range(30, 50)
    ]
    produce(broker.bootstrap, topic, history + later[:10])
    tail = later[10:]
    across = check_typed_read(
        spark, lake, topic, lambda: produce(broker.bootstrap, topic, tail), valueFormat="protobuf"
    )
    by_card = {r["value"]["card"]: r["value"] for r in across}
    assert by_card["c0"]["id"] is None and by_card["c3"]["to"] == {"city": "Oslo", "zip": None}
    assert by_card["c3"]["items"] == [] and by_card[None]["items"] == ["tea"]
    assert sorted(r["value"]["note"] for r in across if r["value"]["note"]) == [
        f"n{i}" for i in range(30, 50)
    ]


def test_streaming_query_reads_history_then_follows_the_log(spark: Any, lake: Lake, tmp_path: Path) -> None:
    topic, broker = "stream-history", lake.broker
    create_topic(broker, topic, "key_value")
    produce(broker.bootstrap, topic, [(None, f"r{i}".encode()) for i in range(120)])
    delete_head(broker, topic, translate_all_then_hold(lake, topic))
    produce(broker.bootstrap, topic, [(None, f"r{i}".encode()) for i in range(120, 180)])
    df = stream(
        spark,
        broker.bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="70",  # several micro-batches, some across the seam
        **lake.options(),
    )
    checkpoint = tmp_path / "ck"
    first = flat(run_available_now(df, checkpoint))
    started = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
    assert sum(started[topic].values()) <= 70

    # The translator commits the tail while the query is stopped: the restarted query's next range
    # lies partly in the table now, and is read once all the same.
    produce(broker.bootstrap, topic, [(None, f"r{i}".encode()) for i in range(180, 240)])
    set_target_lag(broker, topic, COMMIT_MS)
    ends = end_offsets(broker, topic)
    wait_until(lambda: lake.offsets(topic) == ends, 60, "the translator to commit the tail")
    produce(broker.bootstrap, topic, [(None, f"r{i}".encode()) for i in range(240, 270)])
    second = flat(run_available_now(df, checkpoint))

    # A running query while records arrive and the translator commits them: each micro-batch's range
    # is split at the seam of the snapshot it pins, wherever the translator has got to.
    third: list[tuple[int, int, bytes]] = []

    def collect(batch_df: Any, _batch_id: int) -> None:
        third.extend((r.partition, r.offset, bytes(r.value)) for r in batch_df.collect())

    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        for first_value in range(270, 330, 20):
            produce(
                broker.bootstrap,
                topic,
                [(None, f"r{i}".encode()) for i in range(first_value, first_value + 20)],
            )
            read = first_value + 20 - 270
            wait_until(lambda read=read: len(third) >= read, 60, "the running query to read them")
        ends = end_offsets(broker, topic)
        wait_until(lambda: lake.offsets(topic) == ends, 60, "the translator to commit them")
        assert query.exception() is None
    finally:
        query.stop()

    rows = first + second + third
    ends = end_offsets(broker, topic)
    assert sorted((p, o) for p, o, _ in rows) == sorted((p, o) for p, end in ends.items() for o in range(end))
    assert sorted(v for _, _, v in rows) == sorted(f"r{i}".encode() for i in range(330))
