"""The JSON Schema and Protobuf walk-throughs in docs/registry.md run as written against a real broker
(its bootstrap address and registry URL put in place of the documented localhost ones)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from strom.testing.broker_process import BrokerProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "registry.md"


def _block(kind: str, after: str) -> str:
    text = DOC.read_text()
    match = re.compile(rf"```{kind}\n(.*?)```", re.S).search(text, text.index(after))
    assert match is not None
    return match.group(1)


def _run(args: list[str], script: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        args, input=script, capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_registry_walkthroughs_run_as_written(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", {"group.initial.rebalance.delay.ms": "0"}) as broker:
        assert broker.http_url is not None

        def placed(code: str) -> str:
            return code.replace("http://localhost:8081", broker.http_url or "").replace(
                "localhost:9092", broker.bootstrap
            )

        # The scripts run in tmp_path: a relative PYTHONPATH (src) is made absolute to keep this checkout.
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        env = {
            **os.environ,
            "STROM_SCHEMA_REGISTRY": broker.http_url,
            "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in paths if p),
        }
        python = [sys.executable, "-"]
        out = _run(python, placed(_block("python", "## JSON Schema")), tmp_path, env)
        assert out.strip() == "{'id': 1, 'to': {'city': 'Oslo'}}"

        shell = f'python() {{ "{sys.executable}" "$@"; }}\n'
        shell += f'strom() {{ "{sys.executable}" -m strom.cli.main "$@"; }}\n'
        _run(["bash", "-e"], shell + _block("sh", "The message classes come from protoc"), tmp_path, env)
        out = _run(python, placed(_block("python", "The message classes come from protoc")), tmp_path, env)
        assert out.endswith("\n['tea']\n")
        assert "message Order {\n  int64 id = 1;\n  repeated string items = 2;\n}" in out
        out = _run(["bash", "-e"], shell + _block("sh", "## Command line"), tmp_path, env)
        schema_id, verdict, header = out.split("\n")[:3]  # the serializer registered it: the same id again
        assert (verdict, header) == (
            "compatible",
            f"subject orders-pb-value version 1 id {schema_id} type PROTOBUF",
        )
