"""A Spark driver for the exactly-once sink tests, run as its own process so a test can SIGKILL it.

    python tests/spark/eos_app.py BOOTSTRAP SOURCE SINK CHECKPOINT MODE [options]

Copies SOURCE (key, value) to SINK through format `strom` with a checkpoint. MODE `stream` runs
micro-batches every 200 ms until the process is killed; `drain` runs Trigger.AvailableNow, prints
"done" and exits. `--fail-value V` adds a UDF that raises on the row whose value is V in a task's first
attempt (after a pause, so rows the sink produced before it reached the broker); `--master` sets the
local master (`local[2,2]` lets Spark retry a failed task once).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("mode", choices=("stream", "drain"))
    parser.add_argument("--guarantee", default="exactly-once")
    parser.add_argument("--max-offsets", default="100")
    parser.add_argument("--fail-value", default=None)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf
    from pyspark.sql.types import BinaryType

    import strom.spark

    spark = (
        SparkSession.builder.master(args.master)
        .appName("strom-eos-app")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    df = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .load()
    )
    if args.fail_value is not None:
        target = args.fail_value.encode()

        @udf(BinaryType())
        def fail_first_attempt(value: bytes) -> bytes:
            from pyspark import TaskContext

            context = TaskContext.get()
            if value == target and context is not None and context.attemptNumber() == 0:
                time.sleep(2.0)  # let the rows already handed to the sink reach the broker
                raise RuntimeError("injected failure in the first attempt")
            return value

        df = df.withColumn("value", fail_first_attempt(df.value))
    writer = (
        df.select("key", "value")
        .writeStream.format("strom")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.sink)
        .option("deliveryGuarantee", args.guarantee)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.mode == "drain":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        print("done", flush=True)
        spark.stop()
        return
    query = writer.trigger(processingTime="200 milliseconds").start()
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
