"""`strom` usage errors and client-side behaviour that need no broker.

Every user error must be exactly one line on stderr with a non-zero exit status and no traceback
(docs/design.md#non-negotiables). The CLI runs as a subprocess, as users run it.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import subprocess
import sys

import pytest

from strom.console.errors import ConsoleError
from strom.console.produce import parse_records
from strom.console.timestamps import parse_timestamp_ms

# Port 1 on loopback refuses connections at once, so "no broker" errors come back quickly.
NO_BROKER = "127.0.0.1:1"


def run_strom(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[bytes], status: int, *needles: str) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == status, stderr
    assert stderr.endswith("\n")
    assert stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in stderr
    return stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "required: COMMAND"),
        (("bogus",), "invalid choice: 'bogus'"),
        (("topics",), "required: ACTION"),
        (("topics", "create"), "required: NAME"),
        (("topics", "create", "t", "--partitions", "0"), "--partitions: must be at least 1"),
        (("topics", "create", "t", "--partitions", "two"), "not an integer: 'two'"),
        (("topics", "create", "t", "--config", "retention.ms"), "expected key=value"),
        (("topics", "delete"), "required: NAME"),
        (("topics", "create", "t", "--batch-size", "0"), "--batch-size: must be at least 1"),
        (("topics", "reassign", "--execute"), "required: --reassignment-json-file"),
        (("topics", "reassign", "--reassignment-json-file", "p.json"), "one of the arguments --execute"),
        (("topics", "reassign", "--reassignment-json-file", "p", "--execute", "--cancel"), "not allowed"),
        (("topics", "alter-config", "t", "--set", "=1"), "expected key=value"),
        (("topics", "add-partitions", "t"), "required: --total"),
        (("produce",), "required: TOPIC"),
        (("produce", "t", "--acks", "2"), "invalid choice: '2'"),
        (("produce", "t", "--compression", "brotli"), "invalid choice: 'brotli'"),
        (("produce", "t", "--header", "novalue"), "expected key=value"),
        (("consume", "t", "--from-beginning", "--offset", "1"), "not allowed with argument --from-beginning"),
        (("consume", "t", "--offset", "-1"), "--offset"),
        (("consume", "t", "--timestamp", "yesterday"), "invalid timestamp 'yesterday'"),
        (("consume", "t", "--max-messages", "0"), "must be at least 1"),
        (("consume", "t", "--timeout-s", "0"), "must be greater than 0"),
        (("groups", "reset-offsets", "g", "--topic", "t"), "one of the arguments --to-earliest"),
        (("groups", "reset-offsets", "g", "--to-earliest"), "required: --topic"),
        (("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"), "not allowed"),
        (("groups", "delete"), "required: GROUP"),
        (("--bootstrap-server",), "expected one argument"),
        (("--request-timeout-s", "soon", "topics", "list"), "not a number"),
        (("consume", "t", "--bogus"), "strom consume: error: unrecognized arguments: --bogus"),
        (("topics", "list", "--bogus", "x"), "strom topics list: error: unrecognized arguments: --bogus x"),
        (("users", "describe", "--mechanism", "X"), "(see 'strom users describe --help')"),
    ],
)
def test_usage_errors_are_one_line_with_status_2(args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(run_strom(*args), 2, needle, "error:", "--help")


def test_help_lists_every_command() -> None:
    result = run_strom("--help")
    assert result.returncode == 0
    for command in ("serve", "topics", "produce", "consume", "groups"):
        assert command in result.stdout.decode()


@pytest.mark.parametrize(
    "args",
    [
        ("topics", "list"),
        ("topics", "describe"),
        ("consume", "t", "--from-beginning"),
        ("groups", "describe", "g"),
    ],
)
def test_unreachable_broker_is_one_line_with_status_1(args: tuple[str, ...]) -> None:
    result = run_strom("--bootstrap-server", NO_BROKER, "--request-timeout-s", "2", *args)
    assert_one_line_error(result, 1, "strom: error:")


def test_produce_to_unreachable_broker_is_one_line() -> None:
    result = run_strom(
        "produce", "t", "--bootstrap-server", NO_BROKER, "--request-timeout-s", "2", stdin=b"x\n"
    )
    assert_one_line_error(result, 1, "strom: error:", NO_BROKER)


def test_global_options_are_accepted_after_the_command() -> None:
    result = run_strom("topics", "list", "--bootstrap-server", NO_BROKER, "--request-timeout-s", "1")
    assert_one_line_error(result, 1, NO_BROKER)


def test_bootstrap_from_environment() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "strom.cli.main", "--request-timeout-s", "1", "topics", "list"],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "STROM_BOOTSTRAP": NO_BROKER},
    )
    assert_one_line_error(result, 1, NO_BROKER)


def test_invalid_librdkafka_property_is_one_line() -> None:
    result = run_strom("produce", "t", "--bootstrap-server", NO_BROKER, "--property", "no.such.property=1")
    assert_one_line_error(result, 1, "no.such.property")


PLAN = b'{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}'


@pytest.mark.parametrize(
    ("args", "stdin", "needle"),
    [
        (("--verify",), b"{not json", "stdin: not JSON"),
        (("--execute",), b'{"version": 1, "partitions": []}', '"partitions" must be a non-empty list'),
        (("--verify", "--wait"), PLAN, "--wait and --wait-timeout-s apply to --execute only"),
        (("--verify", "--bootstrap-server", NO_BROKER, "--request-timeout-s", "2"), PLAN, NO_BROKER),
    ],
)
def test_reassign_errors_are_one_line(args: tuple[str, ...], stdin: bytes, needle: str) -> None:
    result = run_strom("topics", "reassign", "--reassignment-json-file", "-", *args, stdin=stdin)
    assert_one_line_error(result, 1, "strom: error:", needle)


def test_group_cannot_combine_with_offset() -> None:
    result = run_strom("consume", "t", "--group", "g", "--offset", "3", "--bootstrap-server", NO_BROKER)
    assert_one_line_error(result, 1, "--offset cannot be used with --group")


# -- pure helpers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1714566600250", 1714566600250),
        ("2024-05-01T12:30:00.250Z", 1714566600250),
        ("2024-05-01T12:30:00.250", 1714566600250),
        ("2024-05-01T14:30:00.250+02:00", 1714566600250),
        ("2024-05-01", int(dt.datetime(2024, 5, 1, tzinfo=dt.UTC).timestamp()) * 1000),
    ],
)
def test_parse_timestamp_ms(text: str, expected: int) -> None:
    assert parse_timestamp_ms(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "-5", "1969-12-31T23:59:59Z", "2024-13-01"])
def test_parse_timestamp_rejects(text: str) -> None:
    with pytest.raises(ConsoleError):
        parse_timestamp_ms(text)


def test_parse_records_without_separator_keeps_bytes_and_skips_empty_lines() -> None:
    lines = io.BytesIO(b"a\n\nb\r\n\xff\x00c\nlast")
    assert list(parse_records(iter(lines), None, keep_empty_lines=False)) == [
        (None, b"a"),
        (None, b"b\r"),
        (None, b"\xff\x00c"),
        (None, b"last"),
    ]


def test_parse_records_keep_empty_lines() -> None:
    lines = io.BytesIO(b"a\n\n\nb\n")
    assert [value for _, value in parse_records(iter(lines), None, keep_empty_lines=True)] == [
        b"a",
        b"",
        b"",
        b"b",
    ]


def test_parse_records_splits_at_first_separator() -> None:
    lines = io.BytesIO(b"k1:v:1\n:empty-key\nk3:\n")
    assert list(parse_records(iter(lines), b":", keep_empty_lines=False)) == [
        (b"k1", b"v:1"),
        (b"", b"empty-key"),
        (b"k3", b""),
    ]


def test_parse_records_missing_separator_names_the_line() -> None:
    records = parse_records(iter(io.BytesIO(b"k:v\nnokey\n")), b":", keep_empty_lines=False)
    assert next(records) == (b"k", b"v")
    with pytest.raises(ConsoleError, match="line 2"):
        next(records)
