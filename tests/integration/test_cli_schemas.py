"""`strom schemas` against a real broker's registry: every action, and one-line errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing import BrokerProcess

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [*V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
V3 = {"type": "record", "name": "Order", "fields": [*V1["fields"], {"name": "total", "type": "double"}]}


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with BrokerProcess(tmp_path_factory.mktemp("cli-schemas") / "data") as broker:
        assert broker.http_url is not None
        yield broker.http_url


def strom(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "schemas", *args, "--registry", url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def schema_file(tmp_path: Path, name: str, doc: object) -> str:
    path = tmp_path / f"{name}.avsc"
    path.write_text(json.dumps(doc, indent=2))
    return str(path)


def test_every_action(registry_url: str, tmp_path: Path) -> None:
    v1, v2, v3 = (schema_file(tmp_path, n, d) for n, d in (("v1", V1), ("v2", V2), ("v3", V3)))
    assert strom(registry_url, "register", "orders-value", v1).stdout.strip() == "1"
    assert strom(registry_url, "register", "orders-value", "-", stdin=json.dumps(V2)).stdout.strip() == "2"
    assert strom(registry_url, "list").stdout.split() == ["orders-value"]
    assert strom(registry_url, "versions", "orders-value").stdout.split() == ["1", "2"]
    shown = strom(registry_url, "get", "orders-value").stdout
    assert shown.startswith("subject orders-value version 2 id 2\n")
    assert json.loads(shown.split("\n", 1)[1]) == V2
    assert json.loads(strom(registry_url, "get", "--id", "1").stdout) == V1

    compatible = strom(registry_url, "check", "orders-value", v2)
    assert (compatible.returncode, compatible.stdout.strip()) == (0, "compatible")
    refused = strom(registry_url, "check", "orders-value", v3)
    assert refused.returncode == 1
    assert refused.stdout.startswith("incompatible\n") and "'total'" in refused.stdout
    register_refused = strom(registry_url, "register", "orders-value", v3)
    assert register_refused.returncode == 1
    assert register_refused.stderr.count("\n") == 1 and "error code 409" in register_refused.stderr

    assert strom(registry_url, "config").stdout.strip() == "BACKWARD"
    assert strom(registry_url, "config", "orders-value", "--set", "none").stdout.strip() == "NONE"
    assert strom(registry_url, "config", "orders-value").stdout.strip() == "NONE"
    assert strom(registry_url, "register", "orders-value", v3).stdout.strip() == "3"
    assert strom(registry_url, "config", "orders-value", "--delete").stdout.strip() == "NONE"

    assert strom(registry_url, "delete", "orders-value", "--version", "1").stdout.split() == ["1"]
    assert strom(registry_url, "delete", "orders-value").stdout.split() == ["2", "3"]
    assert strom(registry_url, "delete", "orders-value", "--permanent").stdout.split() == ["1", "2", "3"]
    assert strom(registry_url, "list", "--deleted").stdout.split() == []


def test_protobuf_and_json_schema_types(registry_url: str, tmp_path: Path) -> None:
    proto_v1 = tmp_path / "order.proto"
    proto_v1.write_text('syntax = "proto3";\npackage shop;\nmessage Order { int64 id = 1; }\n')
    proto_v2 = tmp_path / "order2.proto"  # the type is taken from the file name
    proto_v2.write_text('syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; }\n')
    first = strom(registry_url, "register", "shop-value", str(proto_v1)).stdout.strip()
    shown = strom(registry_url, "get", "shop-value").stdout
    assert shown == (
        f"subject shop-value version 1 id {first} type PROTOBUF\n"
        'syntax = "proto3";\npackage shop;\nmessage Order {\n  int64 id = 1;\n}\n'
    )
    refused = strom(registry_url, "check", "shop-value", str(proto_v2))
    assert refused.returncode == 1 and "FIELD_SCALAR_KIND_CHANGED at #/Order/1" in refused.stdout

    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    wider = {**closed, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    json_v1, json_v2 = schema_file(tmp_path, "j1", closed), schema_file(tmp_path, "j2", wider)
    assert strom(registry_url, "register", "j-value", json_v1, "--type", "json").returncode == 0
    compatible = strom(registry_url, "check", "j-value", json_v2, "--type", "JSON")
    assert (compatible.returncode, compatible.stdout.strip()) == (0, "compatible")
    shown = strom(registry_url, "get", "j-value").stdout
    assert shown.split("\n", 1)[0].endswith(" type JSON") and json.loads(shown.split("\n", 1)[1]) == closed


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("versions", "no-such-subject"), "Subject 'no-such-subject' not found. (error code 40401)"),
        (("get", "--id", "4242"), "Schema 4242 not found (error code 40403)"),
        (("get", "x", "zero"), "error code 42202"),
        (("config", "--set", "SIDEWAYS"), "error code 42203"),
        (("register", "s", "/no/such/file.avsc"), "cannot read /no/such/file.avsc"),
    ],
)
def test_errors_are_one_line(registry_url: str, args: tuple[str, ...], expected: str) -> None:
    result = strom(registry_url, *args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert result.stdout == ""


def test_no_registry_listening_names_the_fix() -> None:
    with socket.socket() as closed:  # a port nothing listens on once closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = strom(f"http://127.0.0.1:{port}", "list")
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert f"cannot reach the schema registry at http://127.0.0.1:{port}" in result.stderr
    assert "'strom serve'" in result.stderr and "--registry" in result.stderr, result.stderr
