"""Clickstream analytics as a Structured Streaming job on Strom (format `strom`, a drop-in for `kafka`).

Pipeline: read the `clicks` topic -> typed columns (Avro through the schema registry with `--registry`:
the value is a struct typed by the subject's schema; otherwise the value is parsed as JSON) -> event time
from `ts` with a watermark ->
per page and 1-minute tumbling window: page views, approximate unique users (HyperLogLog++) and p95
latency -> each micro-batch (append mode: a window is emitted once, when the watermark passes its end)
goes to an output topic, keyed `"<page>|<window start ISO-8601>"` with a JSON value, and to a Parquet table
under `<parquet>/batch_id=N` (overwritten if Spark re-runs batch N after a restart, so the table holds
each window once). Offsets and aggregation state live in the checkpoint directory.

Usage::

    python examples/clickstream_job.py --bootstrap 127.0.0.1:9092 --input clicks --output page-stats \
        --parquet /tmp/page-stats --checkpoint /tmp/ck --seconds 60 [--registry http://127.0.0.1:8081]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

WATERMARK = "30 seconds"
WINDOW = "1 minute"
CLICK_SCHEMA = "user string, page string, latency_ms int, ts long"


def spark_session(app: str = "strom-clickstream") -> Any:
    """A local SparkSession with format `strom` registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import strom.spark

    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    return spark


def page_stats(raw: Any) -> Any:
    """Kafka records -> (window_start, window_end, page, views, unique_users, p95_latency_ms)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if isinstance(raw.schema["value"].dataType, StructType):  # valueFormat avro: already typed
        clicks = raw.select("value.*")
    else:
        clicks = raw.select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("c")).select("c.*")
    return (
        clicks.where(F.col("page").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", WATERMARK)
        .groupBy(F.window("event_time", WINDOW), "page")
        .agg(
            F.count("*").alias("views"),
            F.approx_count_distinct("user").alias("unique_users"),
            F.percentile_approx("latency_ms", 0.95).alias("p95_latency_ms"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            "views",
            "unique_users",
            "p95_latency_ms",
        )
    )


def write_batch(bootstrap: str, output_topic: str, parquet_dir: str, on_batch: Any = None) -> Any:
    """A foreachBatch function writing one micro-batch of page stats to the topic and to Parquet."""

    def write(batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        batch = batch.persist()
        try:
            batch.write.mode("overwrite").parquet(f"{parquet_dir}/batch_id={batch_id}")
            records = batch.select(
                F.concat_ws("|", "page", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")).alias(
                    "key"
                ),
                F.to_json(F.struct(*batch.columns)).alias("value"),
            )
            records.write.mode("append").format("strom").option("kafka.bootstrap.servers", bootstrap).option(
                "topic", output_topic
            ).save()
            if on_batch is not None:
                on_batch(batch, batch_id)
        finally:
            batch.unpersist()

    return write


def start_job(
    spark: Any,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    parquet_dir: str,
    checkpoint: str,
    *,
    available_now: bool = False,
    trigger_interval: str = "2 seconds",
    on_batch: Any = None,
    extra_options: dict[str, str] | None = None,
    registry_url: str | None = None,
) -> Any:
    """Start the streaming query; returns the StreamingQuery."""
    reader = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
    )
    if registry_url is not None:
        reader = reader.option("valueFormat", "avro").option("schema.registry.url", registry_url)
    for key, value in (extra_options or {}).items():
        reader = reader.option(key, value)
    writer = (
        page_stats(reader.load())
        .writeStream.outputMode("append")
        .foreachBatch(write_batch(bootstrap, output_topic, parquet_dir, on_batch))
        .option("checkpointLocation", checkpoint)
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=trigger_interval)
    )
    return writer.start()


def print_batch(batch: Any, batch_id: int) -> None:
    rows = batch.orderBy("window_start", "page").collect()
    if not rows:
        return
    print(f"--- batch {batch_id}: {len(rows)} closed window(s)")
    for r in rows:
        print(
            f"  {r.window_start:%H:%M}-{r.window_end:%H:%M} {r.page:<10} views={r.views:<5} "
            f"unique_users~{r.unique_users:<4} p95_latency_ms={r.p95_latency_ms}"
        )
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description="Clickstream page statistics on Strom")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", default="clicks")
    parser.add_argument("--output", default="page-stats")
    parser.add_argument("--parquet", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--seconds", type=float, default=60.0, help="run time (0: until interrupted)")
    parser.add_argument("--registry", help="schema registry URL: read the value as Avro")
    args = parser.parse_args()
    spark = spark_session()
    query = start_job(
        spark,
        args.bootstrap,
        args.input,
        args.output,
        args.parquet,
        args.checkpoint,
        on_batch=print_batch,
        registry_url=args.registry,
    )
    try:
        query.awaitTermination(args.seconds or None)
    finally:
        query.stop()
        time.sleep(0.5)
        spark.stop()


if __name__ == "__main__":
    main()
