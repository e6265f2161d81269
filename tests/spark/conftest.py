"""Fixtures for the Spark suite: one local SparkSession per run, a real broker, Kafka helpers.

The SparkSession is session-scoped (start-up costs ~10 s); the broker comes from the `strom_broker`
fixture of the `strom.testing` pytest plugin. Python workers run this interpreter (PYSPARK_PYTHON), so
they import the same, installed, `strom` package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import strom.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("strom-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.pollingDelay", "50ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    strom.spark.register(session)
    yield session
    session.stop()
