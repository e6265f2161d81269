"""One Spark read across an Iceberg topic's table and its log, with the table in a REST catalog
(SeaweedFS's ``weed mini``: the catalog signs with SigV4, the data files are in its S3 table bucket)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.testing import BrokerProcess
from tests.integration.iceberg_rest_server import IcebergRestServer
from tests.object_stores import serving
from tests.spark.test_lake_history import Lake, check_key_value_read

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with serving(IcebergRestServer(Path(tmp_path_factory.mktemp("weed-mini")))) as server:
        broker = BrokerProcess(
            tmp_path_factory.mktemp("lake-history-rest") / "data",
            {"strom.iceberg.translation.interval.ms": "100", **server.broker_settings()},
        )
        broker.start()
        try:
            yield Lake(broker, {"type": "rest", **server.catalog_properties()})
        finally:
            broker.stop()


def test_batch_read_across_a_rest_catalogs_table_and_the_log(spark: Any, lake: Lake) -> None:
    check_key_value_read(spark, lake, "kv-history-rest")
