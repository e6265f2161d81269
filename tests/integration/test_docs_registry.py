"""The JSON Schema and Protobuf walk-throughs in docs/registry.md run as written against a real broker
(its bootstrap address and registry URL put in place of the documented localhost ones)."""

from __future__ import annotations

import sys
from pathlib import Path

from strom.testing.broker_process import BrokerProcess
from tests.integration.doc_blocks import DOCS, SHELL_PRELUDE, block, run_script, user_env

DOC = DOCS / "registry.md"


def test_registry_walkthroughs_run_as_written(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", {"group.initial.rebalance.delay.ms": "0"}) as broker:
        assert broker.http_url is not None

        def placed(code: str) -> str:
            return code.replace("http://localhost:8081", broker.http_url or "").replace(
                "localhost:9092", broker.bootstrap
            )

        env = user_env(STROM_SCHEMA_REGISTRY=broker.http_url)
        python = [sys.executable, "-"]
        out = run_script(python, placed(block(DOC, "python", "## JSON Schema")), tmp_path, env)
        assert out.strip() == "{'id': 1, 'to': {'city': 'Oslo'}}"

        shell = SHELL_PRELUDE
        run_script(
            ["bash", "-e"], shell + block(DOC, "sh", "The message classes come from protoc"), tmp_path, env
        )
        out = run_script(
            python, placed(block(DOC, "python", "The message classes come from protoc")), tmp_path, env
        )
        assert out.endswith("\n['tea']\n")
        assert "message Order {\n  int64 id = 1;\n  repeated string items = 2;\n}" in out
        out = run_script(["bash", "-e"], shell + block(DOC, "sh", "## Command line"), tmp_path, env)
        schema_id, verdict, header = out.split("\n")[:3]  # the serializer registered it: the same id again
        assert (verdict, header) == (
            "compatible",
            f"subject orders-pb-value version 1 id {schema_id} type PROTOBUF",
        )
