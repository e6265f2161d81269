"""Spark pipelines on Strom: a PySpark Python Data Source that is a drop-in for Spark's Kafka connector.

Usage::

    import strom.spark
    strom.spark.register(spark)
    df = (spark.readStream.format("strom")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())

Theory of operation (details in each module's docstring):

* `source` -- the DataSource: fixed Kafka schema, option validation, reader/writer factories.
* `options` -- Spark Kafka option semantics as pure functions; offsets JSON `{"topic": {"partition": n}}`.
* `metadata` -- driver-side AdminClient lookups: partitions of a subscription; earliest, latest and
  by-timestamp offsets.
* `planning` -- pure arithmetic: read limits, data-loss checks, splitting ranges into tasks.
* `reader` -- batch and micro-batch readers; stream offsets live in Spark's checkpoint.
* `fetcher` -- executor-side reading of one offset range (assign + seek, bounded by the planned end,
  never past the high watermark, or the last stable offset under read_committed, the default) into
  Arrow record batches.
* `writer` -- the sink: idempotent producer, Java-compatible murmur2 key placement.
* `transactional` -- the exactly-once streaming sink: a transaction per task and micro-batch, fenced
  and resumed after the committed rows on a re-run.
* `partitioner` -- murmur2 as Java computes it, for predicting placements.
* `deploy` -- which Python runs Spark's Python workers (set by `register()`, checked at once).

Only this package imports pyspark; it reaches brokers only through confluent-kafka clients.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT_NAME", "register"]

FORMAT_NAME = "strom"


def register(spark: Any) -> None:
    """Register format `strom` on a SparkSession (registration is per session).

    Also points Spark's Python workers at an interpreter that has `strom` (see `strom.spark.deploy`):
    `PYSPARK_PYTHON`, else the `spark.pyspark.python` conf, else this interpreter on a `local` master.

    Raises:
        PythonWorkerError: a cluster master without either setting, or an interpreter that cannot
            import `strom` -- the message names the fix.
    """
    import os
    import sys

    from strom.spark.deploy import check_imports_strom, choose_python_exec
    from strom.spark.source import StromDataSource

    context = spark.sparkContext
    conf = context.getConf()
    choice = choose_python_exec(
        env_python=os.environ.get("PYSPARK_PYTHON"),
        conf_python=conf.get("spark.pyspark.python", None),
        master=context.master,
        current_python=sys.executable,
    )
    check_imports_strom(choice)
    # PySpark wraps the data source with the context's pythonExec: set it before registering.
    context.pythonExec = choice.python
    spark.dataSource.register(StromDataSource)
