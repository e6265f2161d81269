"""docs/iceberg.md runs as written: its "Turning it on" block creates the topic on a broker whose log dir
is ``./data`` of the test's directory (as ``strom serve`` has it), Avro orders are produced with
confluent-kafka's AvroSerializer, and the pyiceberg, DuckDB and polars examples of "Reading the tables"
run there, unchanged, and print every record."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.testing.broker_process import BrokerProcess
from tests.integration.doc_blocks import DOCS, SHELL_PRELUDE, block, run_script, user_env
from tests.integration.iceberg_readers import rows_or_none, sql_catalog_table
from tests.integration.kip848_clients import wait_until

DOC = DOCS / "iceberg.md"
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
COUNT = 30


def test_iceberg_page_runs_as_written(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = {"log.dirs": str(data), "strom.iceberg.translation.interval.ms": "100"}
    with BrokerProcess(tmp_path / "broker", settings) as broker:
        assert broker.http_url is not None
        env = user_env(STROM_BOOTSTRAP=broker.bootstrap)
        turn_on = block(DOC, "sh", "## Turning it on")
        assert turn_on.startswith("strom serve ")  # the broker above; the rest of the block as written
        run_script(["bash", "-e"], SHELL_PRELUDE + turn_on.split("\n", 1)[1], tmp_path, env)

        serialize = AvroSerializer(SchemaRegistryClient({"url": broker.http_url}), json.dumps(ORDER))
        context = SerializationContext("orders", MessageField.VALUE)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(COUNT):
            producer.produce("orders", serialize({"id": i}, context), partition=i % 3)
        assert producer.flush(30) == 0

        # The documented target lag is 10 s: wait for every record to be in the table.
        def in_table() -> int:
            return len(rows_or_none(lambda: sql_catalog_table(str(data), "orders"), ["id"]))

        assert wait_until(lambda: in_table() == COUNT, 120, 0.5), f"{in_table()} records in the table"

        # The DuckDB and polars examples read `table` of the pyiceberg one, as a user's session would.
        script = "".join(
            block(DOC, "python", after) for after in ("pyiceberg:", "DuckDB, with its iceberg", "polars:")
        )
        out = run_script([sys.executable, "-"], script, tmp_path, env)
    assert '{"0":10,"1":10,"2":10}' in out  # pyiceberg: the snapshot's next offsets
    duckdb_rows = next(line for line in out.splitlines() if line.startswith("[("))
    assert sorted(ast.literal_eval(duckdb_rows)) == sorted((i % 3, i // 3, i) for i in range(COUNT))
    assert "shape: (10, " in out  # polars: partition 0's ten rows
