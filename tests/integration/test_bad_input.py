"""Bad input never hurts the broker (docs/design.md#non-negotiables), against a live broker process.

Every case checks four things: the offending connection gets the right Kafka error code or is closed;
the broker log gains a line about it; a second client on its own connection (the *witness*) is served
correctly before, during and after; and every record acknowledged to the witness is still readable,
in order, exactly once. The hypothesis test at the end feeds random and mutated frames over many
connections and then requires a normal confluent-kafka round trip. (Decoder-level fuzzing lives in
tests/unit/test_codec_fuzz.py.)
"""

from __future__ import annotations

import itertools
import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.api import ApiKey
from strom.protocol.codec import encode_request
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import decode_batches
from strom.testing import BrokerProcess

from .rawclient import BrokerClosed, RawClient, batch, fetch_body, produce_body

REQUEST_MAX_BYTES = 64 * 1024
MESSAGE_MAX_BYTES = 4000
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("bad-input") / "data",
        {
            "socket.request.max.bytes": str(REQUEST_MAX_BYTES),
            "message.max.bytes": str(MESSAGE_MAX_BYTES),
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class LogWatch:
    """Lines the broker logged since this watch was made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = path.stat().st_size if path.exists() else 0

    def new_text(self) -> str:
        with open(self.path, "rb") as fh:
            fh.seek(self.start)
            return fh.read().decode(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float = 5.0) -> str:
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern, re.IGNORECASE)
        while True:
            text = self.new_text()
            match = regex.search(text)
            if match:
                return text[text.rfind("\n", 0, match.start()) + 1 : text.find("\n", match.end())]
            if time.monotonic() > deadline:
                raise AssertionError(f"no broker log line matching {pattern!r}; new log:\n{text[-3000:]}")
            time.sleep(0.05)


class Witness:
    """A well-behaved client on its own connection; everything acknowledged to it must stay readable."""

    def __init__(self, bootstrap: str) -> None:
        self.client = RawClient(bootstrap)
        self.topic = f"witness-{next(_names)}"
        assert self.client.create_topic(self.topic, 1) == 0
        self.acked: list[tuple[int, bytes]] = []
        self.check()

    def check(self) -> None:
        value = b"witness-%d" % len(self.acked)
        resp = self.client.produce(self.topic, 0, batch([value]))
        assert resp["error_code"] == 0, resp
        self.acked.append((resp["base_offset"], value))
        part = self.client.fetch(self.topic, 0, 0)
        assert part["error_code"] == 0
        got = [(r.offset, r.value) for b in decode_batches(part["records"]) for r in b.records]
        assert got == self.acked
        assert part["high_watermark"] == len(self.acked)


@pytest.fixture
def witness(broker: BrokerProcess) -> Iterator[Witness]:
    w = Witness(broker.bootstrap)
    yield w
    w.check()
    assert broker.proc is not None and broker.proc.poll() is None, "the broker process died"
    w.client.close()


@pytest.fixture
def logs(broker: BrokerProcess) -> LogWatch:
    return LogWatch(broker.log_path)


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(broker.bootstrap, timeout_s=10) as client:
        yield client


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"bad") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def assert_still_served(raw: RawClient) -> None:
    """The offending connection itself keeps working after an error code."""
    resp = raw.call(ApiKey.METADATA, 1, {"topics": []})
    assert resp["brokers"][0]["node_id"] == 0


def leo(raw: RawClient, topic: str, partition: int = 0) -> int:
    return int(raw.list_offset(topic, partition, -1)["offset"])


def patched(data: bytes, pos: int, fmt: str, value: int, fix_crc: bool = True) -> bytes:
    """``data`` with one header field overwritten, the CRC recomputed unless told otherwise."""
    buf = bytearray(data)
    struct.pack_into(fmt, buf, pos, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


# -- framing: the connection is closed ---------------------------------------------------------------


CLOSING_FRAMES = {
    "garbage": frame(b"\xde\xad\xbe\xef" * 16),
    "negative-size": struct.pack(">i", -1) + b"\x00" * 16,
    "min-int-size": struct.pack(">i", -(1 << 31)) + b"\x00" * 16,
    "tiny-size": struct.pack(">i", 3) + b"\x00\x03\x00",
    "oversized": struct.pack(">i", REQUEST_MAX_BYTES + 1) + b"\x00" * 64,
    "huge-size": struct.pack(">i", (1 << 31) - 1) + b"\x00" * 64,
    "unknown-api-key": frame(header(9999, 0) + b"\x00" * 8),
    "negative-api-key": frame(header(-5, 0) + b"\x00" * 8),
    "not-served-api": frame(header(ApiKey.DESCRIBE_QUORUM, 0) + b"\x00" * 16),  # KRaft only
    "unsupported-version": frame(header(ApiKey.LIST_OFFSETS, 0) + b"\x00" * 16),  # below the minimum (1)
    "version-above-specs": frame(header(ApiKey.PRODUCE, 999) + b"\x00" * 16),
    "negative-version": frame(header(ApiKey.FETCH, -1) + b"\x00" * 16),
    "truncated-body": frame(header(ApiKey.METADATA, 1) + b"\x00\x00\x00\x05\x00\x10ab"),
    "trailing-bytes": frame(header(ApiKey.METADATA, 1) + b"\xff\xff\xff\xff" + b"extra"),
    "bad-array-length": frame(header(ApiKey.METADATA, 1) + b"\x7f\xff\xff\xff"),
    "bad-client-id-length": frame(struct.pack(">hhih", ApiKey.METADATA, 1, 1, -7) + b"\xff" * 4),
    "bad-utf8-topic": frame(header(ApiKey.METADATA, 1) + b"\x00\x00\x00\x01\x00\x02\xff\xfe"),
    "truncated-header": frame(b"\x00\x03\x00"),
}
LOG_PATTERNS = {
    "negative-size": r"request size -1 outside",
    "oversized": rf"request size {REQUEST_MAX_BYTES + 1} outside",
    "unknown-api-key": r"API key 9999 v0 is not served",
    "not-served-api": r"API key 55 v0 is not served",
    "unsupported-version": r"API key 2 v0 is not served",
}


@pytest.mark.parametrize("name", sorted(CLOSING_FRAMES))
def test_bad_frame_closes_connection(
    raw: RawClient, witness: Witness, logs: LogWatch, broker: BrokerProcess, name: str
) -> None:
    raw.send_bytes(CLOSING_FRAMES[name])
    witness.check()  # served while the bad connection is open
    assert raw.closed_by_peer(5.0), "the broker kept a connection that sent garbage"
    logs.wait_for(LOG_PATTERNS.get(name, r"closing connection from 127\.0\.0\.1"))
    assert "Traceback" not in logs.new_text()


def test_valid_request_then_garbage_on_same_connection(
    raw: RawClient, witness: Witness, logs: LogWatch
) -> None:
    """Pipelined: the good request is answered in order, then the connection is closed at the garbage."""
    good = encode_request(ApiKey.API_VERSIONS, 0, 11, "x", {})
    raw.send_bytes(good + frame(b"\x00" * 40))
    payload = raw.recv_frame()
    assert struct.unpack_from(">i", payload)[0] == 11
    assert raw.closed_by_peer(5.0)
    logs.wait_for(r"closing connection")
    witness.check()


@pytest.mark.parametrize("sent", [2, 4, 30])
def test_truncated_frame_then_disconnect(
    broker: BrokerProcess, witness: Witness, logs: LogWatch, sent: int
) -> None:
    """A client that dies mid-frame: the broker notes it and forgets the connection."""
    whole = encode_request(ApiKey.METADATA, 1, 5, "x", {"topics": [{"name": "t" * 40}]})
    assert len(whole) > sent
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(whole[:sent])
        witness.check()
    logs.wait_for(r"closed mid-request|closed the connection mid")
    witness.check()


def test_size_just_over_the_limit_while_others_produce(
    broker: BrokerProcess, raw: RawClient, witness: Witness, logs: LogWatch
) -> None:
    """A request over socket.request.max.bytes is refused before its body is read (no buffering)."""
    body = produce_body(witness.topic, 0, batch([b"x" * (REQUEST_MAX_BYTES + 100)]))
    raw.send_bytes(encode_request(ApiKey.PRODUCE, 8, 3, "big", body))
    assert raw.closed_by_peer(5.0)
    logs.wait_for(r"outside 8\.\.65536")
    witness.check()


# -- ApiVersions: answered, not closed ----------------------------------------------------------------


def test_unsupported_api_versions_version_is_answered(raw: RawClient, witness: Witness) -> None:
    raw.send_bytes(frame(header(ApiKey.API_VERSIONS, 77, correlation_id=31) + b"\x00" * 3))
    payload = raw.recv_frame()
    assert struct.unpack_from(">ih", payload) == (31, ErrorCode.UNSUPPORTED_VERSION)
    assert_still_served(raw)
    witness.check()


# -- produce payloads: error codes, connection kept ---------------------------------------------------


def _produce_error(raw: RawClient, topic: str, records: bytes | None, acks: int = -1) -> int:
    before = leo(raw, topic)
    resp = raw.produce(topic, 0, records, acks=acks)
    assert resp["base_offset"] == -1
    assert leo(raw, topic) == before, "a rejected batch was appended"
    assert_still_served(raw)
    return int(resp["error_code"])


@pytest.fixture
def topic(raw: RawClient) -> str:
    name = f"bad-{next(_names)}"
    assert raw.create_topic(name, 1) == 0
    assert raw.produce(name, 0, batch([b"seed"]))["error_code"] == 0
    return name


def test_bad_crc(raw: RawClient, topic: str, witness: Witness, logs: LogWatch) -> None:
    good = batch([b"payload"])
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    assert _produce_error(raw, topic, corrupt) == ErrorCode.CORRUPT_MESSAGE
    flipped_crc = patched(good, 17, ">I", 0x12345678, fix_crc=False)
    assert _produce_error(raw, topic, flipped_crc) == ErrorCode.CORRUPT_MESSAGE
    logs.wait_for(rf"produce to {topic}-0 .*CRC")
    witness.check()


@pytest.mark.parametrize("magic", [0, 1, 3, 0x7F, -1])
def test_bad_magic(raw: RawClient, topic: str, witness: Witness, logs: LogWatch, magic: int) -> None:
    code = _produce_error(raw, topic, patched(batch([b"m"]), 16, ">b", magic))
    # Kafka answers INVALID_RECORD for non-v2 batches in Produce v3+; CORRUPT_MESSAGE and
    # UNSUPPORTED_FOR_MESSAGE_FORMAT are the codes older brokers used.
    assert code in (
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.INVALID_RECORD,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    )
    logs.wait_for(rf"produce to {topic}-0 .*(magic|format v)")
    witness.check()


@pytest.mark.parametrize(
    ("field", "pos", "fmt", "value"),
    [
        ("last_offset_delta-high", 23, ">i", 5),
        ("last_offset_delta-negative", 23, ">i", -1),
        ("records_count-high", 57, ">i", 9),
        ("records_count-zero", 57, ">i", 0),
        ("records_count-negative", 57, ">i", -3),
    ],
)
def test_offset_delta_and_count_mismatch(
    raw: RawClient, topic: str, witness: Witness, logs: LogWatch, field: str, pos: int, fmt: str, value: int
) -> None:
    bad = patched(batch([b"a", b"b"]), pos, fmt, value)
    assert _produce_error(raw, topic, bad) in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE)
    logs.wait_for(rf"produce to {topic}-0 .*rejected")
    witness.check()


@pytest.mark.parametrize(
    ("what", "mutate"),
    [
        ("batch-length-beyond-payload", lambda b: patched(b, 8, ">i", len(b) + 100, fix_crc=False)),
        ("batch-length-below-header", lambda b: patched(b, 8, ">i", 10, fix_crc=False)),
        ("truncated-batch", lambda b: b[:40]),
        ("trailing-partial-batch", lambda b: b + b[:30]),
        ("empty-records", lambda b: b""),
        ("null-records", lambda b: None),
        ("producer-id-without-sequence", lambda b: patched(b, 43, ">q", 77)),
        ("two-compressed-batches", None),
    ],
)
def test_malformed_batches(raw: RawClient, topic: str, witness: Witness, what: str, mutate: Any) -> None:
    if mutate is None:
        from strom.protocol.records.builder import build_batch

        one = build_batch([(None, b"z", (), 1)], compression=1)
        payload = one + one
    else:
        payload = mutate(batch([b"a", b"b"]))
    code = _produce_error(raw, topic, payload)
    assert code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), ErrorCode(code)
    witness.check()


def test_control_batch_from_a_client(raw: RawClient, topic: str, witness: Witness, logs: LogWatch) -> None:
    from strom.protocol.records.builder import build_batch

    control = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), 1)], is_control=True)
    assert _produce_error(raw, topic, control) == ErrorCode.INVALID_RECORD
    logs.wait_for(rf"produce to {topic}-0 .*control")
    witness.check()


def test_message_too_large_broker_limit(raw: RawClient, topic: str, witness: Witness, logs: LogWatch) -> None:
    big = batch([b"x" * (MESSAGE_MAX_BYTES + 10)])
    assert _produce_error(raw, topic, big) == ErrorCode.MESSAGE_TOO_LARGE
    logs.wait_for(rf"produce to {topic}-0 .*exceeds {MESSAGE_MAX_BYTES}")
    just_fits = batch([b"x" * (MESSAGE_MAX_BYTES - 200)])
    assert len(just_fits) <= MESSAGE_MAX_BYTES
    assert raw.produce(topic, 0, just_fits)["error_code"] == 0
    witness.check()


def test_message_too_large_topic_override(raw: RawClient, witness: Witness, logs: LogWatch) -> None:
    small, large = f"small-{next(_names)}", f"large-{next(_names)}"
    assert raw.create_topic(small, 1, {"max.message.bytes": "1000"}) == 0
    assert raw.create_topic(large, 1, {"max.message.bytes": str(3 * MESSAGE_MAX_BYTES)}) == 0
    assert _produce_error(raw, small, batch([b"y" * 1200])) == ErrorCode.MESSAGE_TOO_LARGE
    logs.wait_for(rf"produce to {small}-0 .*exceeds 1000")
    # the topic override wins over the broker's message.max.bytes, both ways (Kafka's rule)
    assert raw.produce(large, 0, batch([b"y" * (2 * MESSAGE_MAX_BYTES)]))["error_code"] == 0
    # and an override set later by AlterConfigs applies to the next produce
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": large,
                "configs": [{"name": "max.message.bytes", "value": "500"}],
            }
        ],
        "validate_only": False,
    }
    assert raw.call(ApiKey.ALTER_CONFIGS, 1, body)["responses"][0]["error_code"] == 0
    assert _produce_error(raw, large, batch([b"y" * 600])) == ErrorCode.MESSAGE_TOO_LARGE
    witness.check()


@pytest.mark.parametrize("acks", [2, 3, -2, 100])
def test_invalid_required_acks(raw: RawClient, topic: str, witness: Witness, acks: int) -> None:
    assert _produce_error(raw, topic, batch([b"a"]), acks=acks) == ErrorCode.INVALID_REQUIRED_ACKS
    witness.check()


def test_produce_to_unknown_topic_or_partition(raw: RawClient, topic: str, witness: Witness) -> None:
    resp = raw.produce(f"no-such-topic-{next(_names)}", 0, batch([b"a"]))
    assert resp["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for partition in (1, 5, -1, (1 << 31) - 1):
        resp = raw.produce(topic, partition, batch([b"a"]))
        assert resp["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    resp = raw.produce("bad/topic", 0, batch([b"a"]))
    assert resp["error_code"] in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION)
    assert_still_served(raw)
    witness.check()


def test_one_bad_partition_does_not_fail_the_others(raw: RawClient, topic: str, witness: Witness) -> None:
    good, bad = batch([b"good"]), patched(batch([b"bad"]), 17, ">I", 1, fix_crc=False)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": good}, {"index": 3, "records": good}]},
            {"name": witness.topic, "partition_data": [{"index": 0, "records": bad}]},
        ],
    }
    resp = raw.call(ApiKey.PRODUCE, 8, body)
    codes = {
        (t["name"], p["index"]): p["error_code"] for t in resp["responses"] for p in t["partition_responses"]
    }
    assert codes == {
        (topic, 0): 0,
        (topic, 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (witness.topic, 0): ErrorCode.CORRUPT_MESSAGE,
    }
    witness.check()


# -- admin input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a" * 250, "has space", "slash/name", "ünïcode", "tab\tname", "nul\x00byte", "star*"],
)
def test_invalid_topic_names(raw: RawClient, witness: Witness, logs: LogWatch, name: str) -> None:
    assert raw.create_topic(name, 1) == ErrorCode.INVALID_TOPIC_EXCEPTION
    meta = raw.call(ApiKey.METADATA, 8, {"topics": [{"name": name}], "allow_auto_topic_creation": True})
    assert meta["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    listed = raw.call(ApiKey.METADATA, 8, {"topics": None})
    assert name not in {t["name"] for t in listed["topics"]}
    assert raw.fetch(name, 0, 0)["error_code"] in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
    )
    witness.check()


@pytest.mark.parametrize(
    "configs",
    [
        {"retention.ms": "forever"},
        {"retention.ms": "99999999999999999999999"},
        {"retention.ms": "-5"},
        {"segment.bytes": "1"},
        {"min.insync.replicas": "0"},
        {"cleanup.policy": "shred"},
        {"message.timestamp.type": "WallClock"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"unclean.leader.election.enable": "maybe"},
        {"no.such.config": "1"},
        {"max.message.bytes": "-1"},
    ],
)
def test_invalid_configs(raw: RawClient, witness: Witness, configs: dict[str, str]) -> None:
    name = f"cfg-{next(_names)}"
    assert raw.create_topic(name, 1, configs) == ErrorCode.INVALID_CONFIG
    assert raw.create_topic(name, 1) == 0
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": name,
                "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()],
            }
        ],
        "validate_only": False,
    }
    resp = raw.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body)
    assert resp["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    assert resp["responses"][0]["error_message"]
    assert raw.produce(name, 0, batch([b"still fine"]))["error_code"] == 0
    witness.check()


@pytest.mark.parametrize(
    ("partitions", "code"), [(0, ErrorCode.INVALID_PARTITIONS), (-7, ErrorCode.INVALID_PARTITIONS)]
)
def test_invalid_partition_counts(raw: RawClient, witness: Witness, partitions: int, code: int) -> None:
    assert raw.create_topic(f"parts-{next(_names)}", partitions) == code
    witness.check()


def test_fetch_and_list_offsets_odd_values(raw: RawClient, topic: str, witness: Witness) -> None:
    """Values that decode fine but make no sense get error codes, never a dropped connection."""
    for offset in (-1, -(1 << 63), 1 << 40):
        assert raw.fetch(topic, 0, offset)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    odd = fetch_body([(topic, 0, 0, -1), (topic, 0, 0, 0), (topic, -3, 0, 100)], max_bytes=-5, min_bytes=-1)
    resp = raw.call(ApiKey.FETCH, 11, odd)
    codes = [p["error_code"] for p in resp["responses"][0]["partitions"]]
    assert codes == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    for ts in (-3, -4, -(1 << 63)):
        code = raw.list_offset(topic, 0, ts)["error_code"]
        assert code in (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST, 0)
    assert_still_served(raw)
    witness.check()


# -- hypothesis: random and mutated frames over many connections --------------------------------------


def _base_frames(topic: str) -> list[bytes]:
    return [
        encode_request(ApiKey.PRODUCE, 8, 1, "fz", produce_body(topic, 0, batch([b"k", b"v"]))),
        encode_request(ApiKey.PRODUCE, 3, 1, "fz", produce_body(topic, 0, batch([b"v3"]), acks=1)),
        encode_request(ApiKey.FETCH, 11, 1, "fz", fetch_body([(topic, 0, 0, 1 << 16)])),
        encode_request(ApiKey.FETCH, 4, 1, "fz", fetch_body([(topic, 0, 0, 1 << 16)])),
        encode_request(ApiKey.METADATA, 8, 1, "fz", {"topics": [{"name": topic}]}),
        encode_request(ApiKey.METADATA, 0, 1, "fz", {"topics": []}),
    ]


@st.composite
def mutated_frame(draw: st.DrawFn, bases: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        pos = draw(st.integers(4, max(len(data) - 1, 4)))
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and pos < len(data):
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:
            del data[pos:]
    if draw(st.booleans()) or len(data) < 4:
        data[0:4] = struct.pack(">i", max(len(data) - 4, 0))  # a consistent size prefix, mostly
    return bytes(data)


INT32 = st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1))
INT64 = st.one_of(st.sampled_from([0, 1, -1, -2, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))


@st.composite
def odd_request(draw: st.DrawFn, topic: str) -> bytes:
    """A request that decodes cleanly but carries odd values: these reach the handlers."""
    name = draw(
        st.one_of(st.just(topic), st.text(max_size=12), st.sampled_from(["", ".", "__consumer_offsets"]))
    )
    kind = draw(st.sampled_from(["produce", "fetch", "list_offsets", "metadata"]))
    if kind == "produce":
        records = bytearray(batch([draw(st.binary(max_size=40))]))
        for _ in range(draw(st.integers(0, 3))):
            records[draw(st.integers(0, len(records) - 1))] = draw(st.integers(0, 255))
        if draw(st.booleans()):
            struct.pack_into(">I", records, 17, crc32c.crc32c(bytes(records[21:])))
        body = produce_body(name, draw(INT32), bytes(records), acks=draw(st.sampled_from([0, 1, -1, 2, -7])))
        return encode_request(ApiKey.PRODUCE, draw(st.integers(0, 13)), 1, "fz", body)
    if kind == "fetch":
        parts = [(name, draw(INT32), draw(INT64), draw(INT32)) for _ in range(draw(st.integers(0, 3)))]
        body = fetch_body(
            parts,
            max_wait_ms=draw(st.integers(-5, 50)),
            min_bytes=draw(INT32),
            max_bytes=draw(INT32),
            isolation_level=draw(st.integers(-2, 3)),
        )
        body["session_id"], body["session_epoch"] = draw(INT32), draw(INT32)
        return encode_request(ApiKey.FETCH, draw(st.integers(4, 18)), 1, "fz", body)
    if kind == "list_offsets":
        body = {
            "replica_id": draw(INT32),
            "isolation_level": draw(st.integers(-2, 3)),
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": draw(INT32),
                            "current_leader_epoch": draw(INT32),
                            "timestamp": draw(INT64),
                        }
                    ],
                }
            ],
        }
        return encode_request(ApiKey.LIST_OFFSETS, draw(st.integers(1, 11)), 1, "fz", body)
    body = {"topics": [{"name": name}], "allow_auto_topic_creation": draw(st.booleans())}
    return encode_request(ApiKey.METADATA, draw(st.integers(1, 13)), 1, "fz", body)


def _random_frame() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(min_size=0, max_size=64),
        st.binary(min_size=4, max_size=200).map(lambda b: struct.pack(">i", len(b)) + b),
        st.tuples(st.integers(-5, 80), st.integers(-2, 20), st.binary(max_size=80)).map(
            lambda t: frame(header(t[0], t[1]) + t[2])
        ),
    )


def _send_and_drain(bootstrap: str, data: bytes) -> None:
    """Send, half-close, read until the broker answers and closes (or a short bound passes)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                sock.settimeout(max(deadline - time.monotonic(), 0.01))
                if not sock.recv(65536):
                    break
        except OSError:
            pass


def test_fuzzed_frames_leave_the_broker_serving(
    broker: BrokerProcess, raw: RawClient, logs: LogWatch
) -> None:
    witness = Witness(broker.bootstrap)
    fuzz_topic = f"fuzz-{next(_names)}"
    assert raw.create_topic(fuzz_topic, 1) == 0
    bases = _base_frames(fuzz_topic)
    sent = 0

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        st.one_of(
            mutated_frame(bases),
            _random_frame(),
            st.lists(odd_request(fuzz_topic), min_size=1, max_size=4).map(b"".join),
        )
    )
    def feed(data: bytes) -> None:
        nonlocal sent
        sent += 1
        _send_and_drain(broker.bootstrap, data)
        if sent % 50 == 0:
            witness.check()

    feed()
    assert sent >= 100
    witness.check()
    assert broker.proc is not None and broker.proc.poll() is None
    # no handler crashed on input that decoded: such a crash is a broker bug, logged with a traceback
    text = logs.new_text()
    assert "Traceback" not in text, text[text.find("Traceback") - 500 : text.find("Traceback") + 3000]

    # a normal client round trip still works
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"after-fuzz-{next(_names)}"
    assert raw.create_topic(topic, 1) == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(20):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "after-fuzz", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(20)]
    witness.client.close()


def test_many_connections_opened_and_dropped(broker: BrokerProcess, witness: Witness) -> None:
    """Connections that connect and vanish (with or without a byte) cost nothing lasting."""
    for i in range(60):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=2) as sock:
            if i % 2:
                sock.sendall(b"\x00")
    witness.check()
    try:
        with RawClient(broker.bootstrap, timeout_s=5) as fresh:
            assert_still_served(fresh)
    except BrokerClosed:  # pragma: no cover - reported with context
        pytest.fail("a fresh connection was refused after many dropped ones")


@pytest.mark.parametrize("version", [3, 6, 7, 8])
def test_zstd_needs_produce_v7(
    raw: RawClient, topic: str, witness: Witness, logs: LogWatch, version: int
) -> None:
    """KIP-110: a zstd batch in Produce v3-6 is UNSUPPORTED_COMPRESSION_TYPE, per partition."""
    from strom.protocol.records.builder import build_batch

    zstd = build_batch([(None, b"zstd" * 20, (), 1)], compression=4)
    before = leo(raw, topic)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": zstd}]},
            {"name": witness.topic, "partition_data": [{"index": 0, "records": batch([b"plain"])}]},
        ],
    }
    resp = raw.call(ApiKey.PRODUCE, version, body)
    codes = [p["error_code"] for t in resp["responses"] for p in t["partition_responses"]]
    if version < 7:
        assert codes == [ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, 0]
        assert leo(raw, topic) == before
        logs.wait_for(rf"produce to {topic}-0 .*zstd")
    else:
        assert codes == [0, 0]
        assert leo(raw, topic) == before + 1
    witness.acked.append((resp["responses"][1]["partition_responses"][0]["base_offset"], b"plain"))
    witness.check()


def test_clients_cannot_write_internal_topics(raw: RawClient, witness: Witness, logs: LogWatch) -> None:
    """Kafka refuses client appends to __consumer_offsets; a forged record could rewrite group offsets."""
    resp = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": "forged", "key_type": 0})  # creates the topic
    assert resp["error_code"] == 0
    forged = batch([b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"], key=b"\x00\x01\x00\x06forged")
    for partition in (0, 1):
        got = raw.produce("__consumer_offsets", partition, forged)
        assert (got["error_code"], got["base_offset"]) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
    logs.wait_for(r"cannot append to internal topic __consumer_offsets")
    assert_still_served(raw)
    witness.check()
