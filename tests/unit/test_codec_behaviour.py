"""strom.protocol.codec: headers, ApiVersions rules, tagged fields, defaults, errors (by api + version)."""

from __future__ import annotations

import struct

import pytest

from strom.protocol import codec, primitives
from strom.protocol.codec import CorruptFrame, UnsupportedVersion

PRODUCE_V8 = {
    "transactional_id": None,
    "acks": -1,
    "timeout_ms": 30000,
    "topic_data": [{"name": "events", "partition_data": [{"index": 0, "records": bytes(range(200))}]}],
}


def frame_payload(frame: bytes) -> bytes:
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    return frame[4:]


# -- ApiVersions --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_v3_v4_response_uses_header_v0_and_no_tags(version: int) -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    frame = codec.encode_response(18, version, 77, body)
    expected = (
        struct.pack(">ih", 77, 0)  # header v0: correlation id only, then error_code
        + bytes([2])  # compact array of 1
        + struct.pack(">hhhB", 18, 0, 4, 0)  # entry + its empty tag section
        + struct.pack(">iB", 0, 0)  # throttle_time_ms + empty body tag section
    )
    assert frame_payload(frame) == expected
    assert codec.decode_response(18, version, frame[4:]) == (
        77,
        {
            "error_code": 0,
            "api_keys": body["api_keys"],
            "throttle_time_ms": 0,
            "supported_features": [],
            "finalized_features_epoch": -1,
            "finalized_features": [],
            "zk_migration_ready": False,
        },
    )


def test_api_versions_v3_tag_written_only_when_not_default() -> None:
    at_default = {"finalized_features_epoch": -1, "zk_migration_ready": False, "supported_features": []}
    assert frame_payload(codec.encode_response(18, 3, 1, at_default)).endswith(b"\x00")
    frame = codec.encode_response(18, 3, 1, {"finalized_features_epoch": 9})
    assert frame.endswith(b"\x01\x01\x08" + struct.pack(">q", 9))  # 1 tag: tag 1, size 8, int64
    assert codec.decode_response(18, 3, frame[4:])[1]["finalized_features_epoch"] == 9


def test_api_versions_v4_error_response_has_v0_body() -> None:
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    frame = codec.encode_response(18, 4, 5, body)
    assert frame_payload(frame) == struct.pack(">ihihhh", 5, 35, 1, 18, 0, 4)
    assert codec.decode_response(18, 4, frame[4:]) == (5, body)


def test_api_versions_v3_request_client_software_fields() -> None:
    body = {"client_software_name": "strom-ü", "client_software_version": "0.1"}
    request = codec.decode_request(frame_payload(codec.encode_request(18, 3, 2, "c", body)))
    assert (request.api_key, request.api_version, request.client_id) == (18, 3, "c")
    assert request.body == body


@pytest.mark.parametrize(("api_key", "version"), [(18, 5), (18, 127), (99, 0), (0, 14), (3, -1)])
def test_unsupported_version_carries_header(api_key: int, version: int) -> None:
    payload = struct.pack(">hhih", api_key, version, 1234, 1) + b"x" + b"\xff" * 3  # body garbage
    with pytest.raises(UnsupportedVersion) as info:
        codec.decode_request(payload)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (api_key, version, 1234)
    with pytest.raises(UnsupportedVersion):
        codec.encode_response(api_key, version, 1234, {})


# -- headers and frames -------------------------------------------------------------------------


def test_produce_v8_request_header_v1_and_zero_copy_records() -> None:
    payload = frame_payload(codec.encode_request(0, 8, 99, "cli", PRODUCE_V8))
    assert payload[:13] == struct.pack(">hhih", 0, 8, 99, 3) + b"cli"
    request = codec.decode_request(payload)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (
        0,
        8,
        99,
        "cli",
    )
    records = request.body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview)
    assert records.obj is payload  # a slice of the caller's buffer, not a copy
    assert bytes(records) == bytes(range(200))


def test_metadata_v12_request_header_v2_tags_are_skipped() -> None:
    payload = frame_payload(codec.encode_request(3, 12, 5, None, {"topics": None}))
    # header v2: key, version, correlation id, client_id (classic, null), tag section
    assert payload[:11] == struct.pack(">hhihB", 3, 12, 5, -1, 0)
    with_header_tags = payload[:10] + b"\x01\x07\x02ab" + payload[11:]  # one unknown header tag
    request = codec.decode_request(with_header_tags)
    assert request.client_id is None
    assert request.body["topics"] is None


def test_metadata_v12_unknown_body_tag_is_skipped() -> None:
    payload = frame_payload(codec.encode_request(3, 12, 5, "c", {"topics": [{"name": "t"}]}))
    assert payload.endswith(b"\x00")
    tagged = payload[:-1] + b"\x02\x05\x01z\x63\x00"  # tags 5 (1 byte) and 99 (0 bytes)
    assert codec.decode_request(tagged).body == codec.decode_request(payload).body


def test_metadata_v8_response_header_v0_and_defaults() -> None:
    frame = codec.encode_response(
        3, 8, 11, {"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "extra": 1}
    )
    correlation_id, body = codec.decode_response(3, 8, frame[4:])
    assert correlation_id == 11
    assert body["brokers"] == [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]
    assert body["cluster_id"] is None
    assert body["controller_id"] == -1
    assert body["cluster_authorized_operations"] == -2147483648  # the JSON default
    assert body["topics"] == []


def test_metadata_v9_response_header_v1() -> None:
    frame = codec.encode_response(3, 9, 11, {})
    assert frame_payload(frame)[:5] == struct.pack(">iB", 11, 0)


@pytest.mark.parametrize(("api_key", "version"), [(0, 0), (0, 1), (0, 2), (8, 0), (8, 1), (1, 0), (2, 0)])
def test_versions_below_spec_minimum_round_trip(api_key: int, version: int) -> None:
    """The specs dropped these versions but their "0+" fields still describe them."""
    body = PRODUCE_V8 if api_key == 0 else {}
    request = codec.decode_request(frame_payload(codec.encode_request(api_key, version, 1, "c", body)))
    assert request.api_version == version
    assert codec.encode_request(api_key, version, 1, "c", request.body) == codec.encode_request(
        api_key, version, 1, "c", body
    )


def test_produce_v0_layout() -> None:
    payload = frame_payload(codec.encode_request(0, 0, 1, None, PRODUCE_V8))
    body = payload[10:]
    assert body[:12] == struct.pack(">hii", -1, 30000, 1) + b"\x00\x06"  # no transactional_id before v3


def test_trailing_bytes_are_corrupt() -> None:
    payload = frame_payload(codec.encode_request(0, 8, 1, "c", PRODUCE_V8))
    with pytest.raises(CorruptFrame, match="left over"):
        codec.decode_request(payload + b"\x00")


def test_a_flexible_request_may_end_with_one_more_tagged_section() -> None:
    """librdkafka 2.16's Metadata v13 for all topics ends with ``01 00 00`` after the body (seen on the
    wire); Kafka ignores it, so Strom accepts exactly one trailing tagged-field section."""
    body = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    payload = frame_payload(codec.encode_request(3, 13, 1, "rdkafka", body))
    assert codec.decode_request(payload + b"\x01\x00\x00").body["topics"] is None
    assert codec.decode_request(payload + b"\x00").body["topics"] is None
    for trailer in (b"\x01\x00", b"\x01\x00\x05ab", b"\x00\x00"):
        with pytest.raises(CorruptFrame, match="left over"):
            codec.decode_request(payload + trailer)


@pytest.mark.parametrize(("api_key", "version"), [(0, 8), (3, 12), (18, 3)])
def test_every_truncation_is_corrupt(api_key: int, version: int) -> None:
    body = PRODUCE_V8 if api_key == 0 else {"topics": [{"name": "abc"}]}
    payload = frame_payload(codec.encode_request(api_key, version, 1, "client", body))
    for cut in range(len(payload)):
        with pytest.raises(CorruptFrame):
            codec.decode_request(payload[:cut])


@pytest.mark.parametrize(
    "body",
    [
        {"acks": "one"},
        {"topic_data": [{"name": 5}]},
        {"topic_data": None},
        {"timeout_ms": 2**40},
    ],
)
def test_produce_v8_encode_rejects_bad_values(body: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="cannot encode"):
        codec.encode_request(0, 8, 1, None, body)


def test_non_nullable_null_is_corrupt() -> None:
    payload = bytearray(frame_payload(codec.encode_request(0, 8, 1, "c", PRODUCE_V8)))
    name_len_at = 10 + 1 + 2 + 2 + 4 + 4  # header, txn id null (i16), acks, timeout, array count
    assert payload[name_len_at : name_len_at + 2] == b"\x00\x06"
    payload[name_len_at : name_len_at + 2] = b"\xff\xff"
    with pytest.raises(CorruptFrame, match="non-nullable"):
        codec.decode_request(bytes(payload))


def test_generated_source_is_readable() -> None:
    source = codec.generated_source(0, 8, is_request=True, decode=True)
    assert source.startswith("def _fn(buf, pos):  # decode ProduceRequest v8")


# -- primitives ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1, 2**32 - 1])
def test_uvarint_round_trip(value: int) -> None:
    raw = primitives.uvarint(value)
    assert primitives.read_uvarint(memoryview(raw + b"!"), 0) == (value, len(raw))


def test_uvarint_rejects_overlong_and_negative() -> None:
    with pytest.raises(ValueError):
        primitives.read_uvarint(memoryview(b"\x80" * 6 + b"\x01"), 0)
    with pytest.raises(ValueError):
        primitives.uvarint(-1)


def test_fetch_v12_tagged_struct_written_only_when_not_default() -> None:
    partition = {
        "partition_index": 0,
        "records": b"",
        "current_leader": {"leader_id": -1, "leader_epoch": -1},
    }
    body = {"responses": [{"topic": "t", "partitions": [partition]}]}
    frame = codec.encode_response(1, 12, 3, body)
    assert (
        codec.encode_response(1, 12, 3, {"responses": [{"topic": "t", "partitions": [{"records": b""}]}]})
        == frame
    )
    partition["current_leader"] = {"leader_id": 2, "leader_epoch": 7}
    frame = codec.encode_response(1, 12, 3, body)
    decoded = codec.decode_response(1, 12, frame[4:])[1]["responses"][0]["partitions"][0]
    assert decoded["current_leader"] == {"leader_id": 2, "leader_epoch": 7}
    assert decoded["diverging_epoch"] is None  # absent tagged struct


def test_differs_from_defaults() -> None:
    defaults = (("leader_id", -1), ("replicas", []))
    assert not primitives.differs_from_defaults({"replicas": ()}, defaults)
    assert primitives.differs_from_defaults({"replicas": [1]}, defaults)
    assert primitives.differs_from_defaults({"leader_id": 0}, defaults)
