"""Interoperability of `strom produce` / `strom consume` with kcat (librdkafka 2.0.2 in Debian).

kcat writes, `strom consume` reads; `strom produce` writes, `kcat -C -e` reads. Keys, values and
headers must survive byte for byte, for every compression codec.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.prerequisites import require_kcat

pytestmark = pytest.mark.kcat


@pytest.fixture(autouse=True)
def _kcat_installed() -> None:
    require_kcat()


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Every byte value except the line and key delimiters, so that each record is exactly one line.
BINARY = bytes(b for b in range(256) if b not in b"\n:")


def run(cmd: list[str], stdin: bytes = b"") -> bytes:
    result = subprocess.run(cmd, input=stdin, capture_output=True, timeout=90, check=False)
    assert result.returncode == 0, (cmd, result.stderr.decode(errors="replace"))
    return result.stdout


def strom(bootstrap: str, *args: str, stdin: bytes = b"") -> bytes:
    return run([sys.executable, "-m", "strom.cli.main", "--bootstrap-server", bootstrap, *args], stdin)


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    topic = f"cli-kcat-{uuid.uuid4().hex[:8]}"
    strom(bootstrap, "topics", "create", topic, "--partitions", str(partitions))
    return topic


def records() -> list[tuple[bytes, bytes]]:
    return [(b"k1", b"plain text"), (b"\xff\x00key", BINARY), (b"k3", b""), (b"", b"keyless? no: empty key")]


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_strom_consumes(strom_broker: str, codec: str) -> None:
    topic = new_topic(strom_broker)
    lines = b"".join(key + b":" + value + b"\n" for key, value in records())
    kcat = ["kcat", "-P", "-b", strom_broker, "-t", topic, "-p", "0", "-K:", "-z", codec]
    run([*kcat, "-H", "trace=abc", "-H", "bin=\u00e9"], lines)
    out = strom(
        strom_broker, "consume", topic, "--from-beginning", "--exit-at-end", "--timeout-s", "30",
        "--print-key", "--print-headers",
    )  # fmt: skip
    assert out == b"".join(
        b"trace:abc,bin:\xc3\xa9\t" + key + b"\t" + value + b"\n" for key, value in records()
    )


@pytest.mark.parametrize("codec", CODECS)
def test_strom_produces_kcat_consumes(strom_broker: str, codec: str) -> None:
    topic = new_topic(strom_broker)
    lines = b"".join(key + b":" + value + b"\n" for key, value in records())
    strom(
        strom_broker, "produce", topic, "--key-separator", ":", "--compression", codec,
        "--header", "trace=abc", "--header", "bin=\u00e9", stdin=lines,
    )  # fmt: skip
    # %K/%S print key/value lengths, so a truncated or padded payload cannot go unnoticed.
    fmt = r"%K|%k|%S|%s|%h\n"
    out = run(["kcat", "-C", "-b", strom_broker, "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt])
    expected = b"".join(
        b"%d|%s|%d|%s|trace=abc,bin=\xc3\xa9\n" % (len(key), key, len(value), value)
        for key, value in records()
    )
    assert out == expected


def test_keyed_placement_matches_kcat_with_murmur2(strom_broker: str) -> None:
    """`strom produce` defaults to murmur2_random: the same partitions as kcat told to use it."""
    ours, theirs = new_topic(strom_broker, 6), new_topic(strom_broker, 6)
    lines = b"".join(b"key-%d:v\n" % i for i in range(60))
    strom(strom_broker, "produce", ours, "--key-separator", ":", stdin=lines)
    run(["kcat", "-P", "-b", strom_broker, "-t", theirs, "-K:", "-X", "partitioner=murmur2_random"], lines)

    def placement(topic: str) -> set[bytes]:
        fmt = r"%p %k\n"
        out = run(["kcat", "-C", "-b", strom_broker, "-t", topic, "-o", "beginning", "-e", "-q", "-f", fmt])
        return set(out.splitlines())

    assert placement(ours) == placement(theirs)
    assert len({line.split()[0] for line in placement(ours)}) > 1
