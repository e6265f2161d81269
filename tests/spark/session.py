"""A local SparkSession (two cores, no UI, UTC) with format ``strom`` registered, for the Spark suite
and for the tiered-storage acceptance run's Spark read. Python workers run this interpreter
(PYSPARK_PYTHON), so they import the same ``strom`` package."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_spark_session(app_name: str) -> Any:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import strom.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    strom.spark.register(session)
    return session
