"""Fixtures for the Spark suite: one local SparkSession per run, a real broker, Kafka helpers.

The SparkSession is session-scoped (start-up costs ~10 s); the broker comes from the `strom_broker`
fixture of the `strom.testing` pytest plugin. Python workers run this interpreter (PYSPARK_PYTHON), so
they import the same, installed, `strom` package.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.session import local_spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = local_spark_session("strom-spark-tests")
    yield session
    session.stop()
