"""`strom topics`, `strom produce` and `strom consume` against a real broker.

The CLI runs as a subprocess, exactly as a user runs it, against the session broker of the
`strom_broker` fixture (plugin `strom.testing`). Each test uses its own topic names, because the
broker is shared by the whole session.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable

import pytest

Strom = Callable[..., subprocess.CompletedProcess[bytes]]


def unique(prefix: str) -> str:
    return f"cli-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def strom(strom_broker: str) -> Strom:
    def run(*args: str, stdin: bytes = b"", check: bool = True) -> subprocess.CompletedProcess[bytes]:
        result = subprocess.run(
            [sys.executable, "-m", "strom.cli.main", "--bootstrap-server", strom_broker, *args],
            input=stdin,
            capture_output=True,
            timeout=90,
            check=False,
        )
        if check:
            assert result.returncode == 0, result.stderr.decode()
            assert result.stderr == b"", result.stderr.decode()
        return result

    return run


def one_line_error(result: subprocess.CompletedProcess[bytes]) -> str:
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("strom: error: ")
    return stderr


def describe(strom: Strom, topic: str) -> list[str]:
    return strom("topics", "describe", topic).stdout.decode().splitlines()


def create(strom: Strom, topic: str, *extra: str) -> None:
    assert strom("topics", "create", topic, *extra).stdout == f"Created topic {topic}.\n".encode()


def test_topics_create_list_describe_alter_grow_delete(strom: Strom) -> None:
    topic = unique("admin")
    create(strom, topic, "--partitions", "3", "--replication-factor", "1", "--config", "retention.ms=123456")
    assert topic in strom("topics", "list").stdout.decode().splitlines()

    header, *partitions = describe(strom, topic)
    assert header.startswith(f"Topic: {topic}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ")
    assert "retention.ms=123456" in header
    assert len(partitions) == 3
    for pid, line in enumerate(partitions):
        fields = dict(field.split(": ", 1) for field in line.strip().split("\t"))
        assert fields["Topic"] == topic
        assert fields["Partition"] == str(pid)
        assert fields["Replicas"] == fields["Isr"] == fields["Leader"]

    out = strom(
        "topics", "alter-config", topic, "--set", "cleanup.policy=compact", "--delete", "retention.ms"
    )
    assert out.stdout == f"Updated configs of topic {topic}.\n".encode()
    header = describe(strom, topic)[0]
    assert "cleanup.policy=compact" in header
    assert "retention.ms" not in header

    strom("topics", "add-partitions", topic, "--total", "5")
    assert describe(strom, topic)[0].startswith(f"Topic: {topic}\tPartitionCount: 5\t")

    assert strom("topics", "delete", topic).stdout == f"Deleted topic {topic}.\n".encode()
    assert topic not in strom("topics", "list").stdout.decode().splitlines()


def test_describe_without_names_covers_every_topic(strom: Strom) -> None:
    first, second = unique("all-a"), unique("all-b")
    create(strom, first, "--partitions", "1")
    create(strom, second, "--partitions", "2")
    headers = [
        line for line in strom("topics", "describe").stdout.decode().splitlines() if line.startswith("Topic:")
    ]
    assert any(line.startswith(f"Topic: {first}\tPartitionCount: 1") for line in headers)
    assert any(line.startswith(f"Topic: {second}\tPartitionCount: 2") for line in headers)


def test_topic_errors_are_one_line(strom: Strom) -> None:
    topic = unique("errors")
    create(strom, topic, "--partitions", "2")
    assert "already exists" in one_line_error(strom("topics", "create", topic, check=False)).lower()
    assert "unknown topic" in one_line_error(strom("topics", "describe", unique("missing"), check=False))
    one_line_error(strom("topics", "create", unique("badcfg"), "--config", "retention.ms=soon", check=False))
    one_line_error(strom("topics", "add-partitions", topic, "--total", "1", check=False))
    one_line_error(strom("topics", "delete", unique("missing"), check=False))
    one_line_error(strom("produce", topic, "--partition", "7", stdin=b"x\n", check=False))
    one_line_error(strom("consume", topic, "--partition", "7", "--exit-at-end", check=False))
    for action in ("describe", "elect-leaders"):
        refused = strom("cluster", action, "--topic", topic, "--topic", "nosuch-topic", check=False)
        assert "unknown topic(s): nosuch-topic" in one_line_error(refused) and refused.stdout == b""


def test_produce_keys_and_headers_then_consume_from_beginning(strom: Strom) -> None:
    topic = unique("keys")
    create(strom, topic, "--partitions", "1")
    strom(
        "produce", topic, "--key-separator", ":", "--header", "h1=x", "--header", "h2=y=z",
        stdin=b"k1:v1\nk2:v:2\n\nk3:\n",
    )  # fmt: skip
    out = strom(
        "consume", topic, "--from-beginning", "--max-messages", "3", "--timeout-s", "20",
        "--print-key", "--print-headers", "--print-offset",
    )  # fmt: skip
    assert out.stdout.decode().splitlines() == [
        "Partition:0\tOffset:0\th1:x,h2:y=z\tk1\tv1",
        "Partition:0\tOffset:1\th1:x,h2:y=z\tk2\tv:2",
        "Partition:0\tOffset:2\th1:x,h2:y=z\tk3\t",
    ]


def test_consume_from_offset_and_exit_at_end(strom: Strom) -> None:
    topic = unique("offset")
    create(strom, topic, "--partitions", "1")
    strom("produce", topic, stdin=b"".join(b"m%d\n" % i for i in range(10)))
    out = strom("consume", topic, "--offset", "7", "--exit-at-end", "--timeout-s", "20")
    assert out.stdout == b"m7\nm8\nm9\n"
    assert strom("consume", topic, "--exit-at-end", "--timeout-s", "20").stdout == b""
    limited = strom("consume", topic, "--from-beginning", "--max-messages", "2", "--timeout-s", "20")
    assert limited.stdout == b"m0\nm1\n"
    beyond = strom("consume", topic, "--offset", "1000", "--exit-at-end", "--timeout-s", "20", check=False)
    assert "out of range" in one_line_error(beyond).lower()


def test_consume_from_timestamp_ms_and_iso(strom: Strom) -> None:
    topic = unique("time")
    create(strom, topic, "--partitions", "2")
    strom("produce", topic, stdin=b"old1\nold2\nold3\n")
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    strom("produce", topic, stdin=b"new1\nnew2\n")
    by_ms = strom("consume", topic, "--timestamp", str(boundary_ms), "--exit-at-end", "--timeout-s", "20")
    assert sorted(by_ms.stdout.splitlines()) == [b"new1", b"new2"]
    iso = dt.datetime.fromtimestamp(boundary_ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    by_iso = strom("consume", topic, "--timestamp", iso, "--exit-at-end", "--timeout-s", "20")
    assert sorted(by_iso.stdout.splitlines()) == [b"new1", b"new2"]
    future = strom(
        "consume", topic, "--timestamp", str(boundary_ms + 3_600_000), "--exit-at-end", "--timeout-s", "20"
    )
    assert future.stdout == b""


def test_keyed_records_land_where_java_clients_put_them(strom: Strom) -> None:
    topic = unique("murmur")
    create(strom, topic, "--partitions", "4")
    keys = [f"user-{i}".encode() for i in range(40)]
    strom("produce", topic, "--key-separator", "=", stdin=b"".join(k + b"=v\n" for k in keys))
    out = strom(
        "consume",
        topic,
        "--from-beginning",
        "--max-messages",
        "40",
        "--timeout-s",
        "20",
        "--print-offset",
        "--print-key",
    )
    placed = {}
    for line in out.stdout.splitlines():
        partition, _offset, key, _value = line.split(b"\t")
        placed[key] = int(partition.removeprefix(b"Partition:"))
    # kafka-python's murmur2 is a port of the Java client's Utils.murmur2 (the oracle here). Its
    # package import trips an importlib DeprecationWarning that pytest's filters turn into an error.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.partitioner.default import murmur2

    assert placed == {key: (murmur2(key) & 0x7FFFFFFF) % 4 for key in keys}


def test_fixed_partition_and_binary_values_round_trip(strom: Strom) -> None:
    topic = unique("binary")
    create(strom, topic, "--partitions", "3")
    payload = bytes(range(256)).replace(b"\n", b"")
    strom(
        "produce", topic, "--partition", "2", "--compression", "gzip", "--acks", "all", stdin=payload + b"\n"
    )
    out = strom(
        "consume", topic, "--partition", "2", "--from-beginning", "--max-messages", "1", "--timeout-s", "20"
    )
    assert out.stdout == payload + b"\n"
    empty = strom(
        "consume", topic, "--partition", "0", "--from-beginning", "--exit-at-end", "--timeout-s", "20"
    )
    assert empty.stdout == b""


def test_keep_empty_lines_and_missing_separator(strom: Strom) -> None:
    topic = unique("empty")
    create(strom, topic, "--partitions", "1")
    strom("produce", topic, "--keep-empty-lines", stdin=b"a\n\nb\n")
    bad = strom("produce", topic, "--key-separator", ":", stdin=b"k:c\nno-separator\n", check=False)
    assert "line 2" in one_line_error(bad)
    out = strom("consume", topic, "--from-beginning", "--exit-at-end", "--timeout-s", "20", "--print-key")
    # The record before the bad line is still delivered; the empty line became an empty value.
    assert out.stdout == b"null\ta\nnull\t\nnull\tb\nk\tc\n"
