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
* `lake_plan`, `lake_source`, `lake_rows` -- `strom.iceberg.history`: an Iceberg topic's history read
  from its table (a pinned snapshot, up to each partition's recorded next offset) and the rest from the
  log, every record once.
* `partitioner` -- murmur2 as Java computes it, for predicting placements.
* `deploy` -- which Python runs Spark's Python workers (set by `register()`, checked at once).

Only this package imports pyspark; it reaches brokers only through confluent-kafka clients.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT_NAME", "PYSPARK_FLOOR", "register"]

FORMAT_NAME = "strom"


PYSPARK_FLOOR = (4, 2)  # latestOffset(start, limit), getDefaultReadLimit, reportLatestOffset: 4.2.0


class PySparkVersionError(RuntimeError):
    """The installed pyspark is older than the data source needs."""


def check_pyspark_version(version: str) -> None:
    """Raises: PySparkVersionError: `version` is below `PYSPARK_FLOOR`, naming the upgrade."""
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < PYSPARK_FLOOR:
        floor = ".".join(map(str, PYSPARK_FLOOR))
        raise PySparkVersionError(
            f"strom.spark needs pyspark >= {floor} (the streaming source uses latestOffset(start, limit), "
            f"getDefaultReadLimit and reportLatestOffset, added in Spark {floor}); found pyspark {version}. "
            f"Upgrade it: pip install 'pyspark>={floor},<5'"
        )


def is_connect_session(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (which has no `sparkContext`)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def register(spark: Any) -> None:
    """Register format `strom` on a SparkSession (registration is per session).

    Classic sessions: also points Spark's Python workers at an interpreter that has `strom` (see
    `strom.spark.deploy`): `PYSPARK_PYTHON`, else the `spark.pyspark.python` conf, else this interpreter
    on a `local` master. Spark Connect sessions: the data source is registered through the connection;
    the server's Python workers (set on the server, with `spark.pyspark.python` or `PYSPARK_PYTHON`) must
    be able to import `strom`, which a client cannot choose or check beforehand.

    Raises:
        PySparkVersionError: pyspark older than 4.2.
        PythonWorkerError: a cluster master without either setting, or an interpreter that cannot
            import `strom` -- the message names the fix.
    """
    import os
    import sys

    import pyspark

    check_pyspark_version(pyspark.__version__)

    from strom.spark.deploy import check_imports_strom, choose_python_exec
    from strom.spark.source import StromDataSource

    if is_connect_session(spark):
        spark.dataSource.register(StromDataSource)
        return
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
