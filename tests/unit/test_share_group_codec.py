"""Golden encodings of KIP-932's ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1 (which
kafka-python's specs lack), written out byte by byte in the order librdkafka 2.16 writes and reads
them, and of DeleteShareGroupOffsets v0's response as Kafka 4.1's admin client reads it: compact
strings and arrays (unsigned varint length + 1, 0 for null), uuids as 16 raw bytes, an empty
tagged-field section (0) after every struct, request header v2 and response header v1."""

from __future__ import annotations

import struct
import uuid

from strom.protocol import codec
from strom.protocol.api import ApiKey

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff").bytes


def s(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def header(api_key: int, correlation_id: int) -> bytes:
    return i16(api_key) + i16(1) + i32(correlation_id) + i16(6) + b"client" + b"\x00"


def test_heartbeat_request_decodes_from_the_wire_layout() -> None:
    wire = header(76, 3) + s("g") + s("m-1") + i32(0) + s(None) + b"\x02" + s("orders") + b"\x00"
    request = codec.decode_request(wire)
    body = request.body
    assert (request.api_key, request.api_version) == (ApiKey.SHARE_GROUP_HEARTBEAT, 1)
    assert (body["group_id"], body["member_id"], body["member_epoch"], body["rack_id"]) == (
        "g",
        "m-1",
        0,
        None,
    )
    assert body["subscribed_topic_names"] == ["orders"]
    assert codec.encode_request(76, 1, 3, "client", body)[4:] == wire


def test_heartbeat_response_encodes_as_librdkafka_reads_it() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": "m-1",
        "member_epoch": 2,
        "heartbeat_interval_ms": 500,
        "assignment": {"assigned_topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 2]}]},
    }
    expected = (
        i32(9)
        + b"\x00"  # response header v1
        + i32(0)
        + i16(0)
        + s(None)
        + s("m-1")
        + i32(2)
        + i32(500)
        + i8(1)  # the nullable Assignment is present
        + b"\x02"
        + TOPIC_ID
        + b"\x03"
        + i32(0)
        + i32(2)
        + b"\x00"  # the topic's tags
        + b"\x00"  # the assignment's tags
        + b"\x00"
    )
    assert codec.encode_response(76, 1, 9, body)[4:] == expected
    body["assignment"] = None
    assert codec.encode_response(76, 1, 9, body)[4:].endswith(i32(500) + i8(-1) + b"\x00")


def test_share_fetch_request_with_an_acknowledgement() -> None:
    wire = (
        header(78, 5)
        + s("g")
        + s("m-1")
        + i32(1)  # ShareSessionEpoch
        + i32(500)  # MaxWaitMs
        + i32(1)  # MinBytes
        + i32(52428800)  # MaxBytes
        + i32(500)  # MaxRecords
        + i32(500)  # BatchSize
        + b"\x02"
        + TOPIC_ID
        + b"\x02"
        + i32(0)
        + b"\x02"
        + i64(10)
        + i64(14)
        + b"\x02"
        + i8(1)
        + b"\x00"  # the batch's tags
        + b"\x00"  # the partition's tags
        + b"\x00"  # the topic's tags
        + b"\x01"  # ForgottenTopicsData: none
        + b"\x00"
    )
    request = codec.decode_request(wire)
    body = request.body
    assert (body["share_session_epoch"], body["max_records"], body["batch_size"]) == (1, 500, 500)
    (topic,) = body["topics"]
    (partition,) = topic["partitions"]
    (batch,) = partition["acknowledgement_batches"]
    assert (batch["first_offset"], batch["last_offset"], list(batch["acknowledge_types"])) == (10, 14, [1])
    assert codec.encode_request(78, 1, 5, "client", body)[4:] == wire


def test_share_fetch_response_carries_acquired_records() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "acquisition_lock_timeout_ms": 30000,
        "responses": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "error_message": None,
                        "acknowledge_error_code": 0,
                        "acknowledge_error_message": None,
                        "current_leader": {"leader_id": -1, "leader_epoch": -1},
                        "records": b"RB",
                        "acquired_records": [{"first_offset": 3, "last_offset": 7, "delivery_count": 2}],
                    }
                ],
            }
        ],
        "node_endpoints": [],
    }
    expected = (
        i32(4)
        + b"\x00"
        + i32(0)
        + i16(0)
        + s(None)
        + i32(30000)
        + b"\x02"
        + TOPIC_ID
        + b"\x02"
        + i32(0)
        + i16(0)
        + s(None)
        + i16(0)
        + s(None)
        + i32(-1)
        + i32(-1)
        + b"\x00"  # CurrentLeader's tags
        + b"\x03RB"  # compact records
        + b"\x02"
        + i64(3)
        + i64(7)
        + i16(2)
        + b"\x00"
        + b"\x00"  # the partition's tags
        + b"\x00"  # the topic's tags
        + b"\x01"  # NodeEndpoints: none
        + b"\x00"
    )
    assert codec.encode_response(78, 1, 4, body)[4:] == expected


def test_share_acknowledge_request_round_trips() -> None:
    wire = (
        header(79, 6)
        + s("g")
        + s("m-1")
        + i32(-1)
        + b"\x02"
        + TOPIC_ID
        + b"\x02"
        + i32(1)
        + b"\x02"
        + i64(0)
        + i64(2)
        + b"\x04"
        + i8(1)
        + i8(2)
        + i8(3)
        + b"\x00"
        + b"\x00"
        + b"\x00"
        + b"\x00"
    )
    body = codec.decode_request(wire).body
    (topic,) = body["topics"]
    (partition,) = topic["partitions"]
    assert partition["partition_index"] == 1
    assert list(partition["acknowledgement_batches"][0]["acknowledge_types"]) == [1, 2, 3]
    assert codec.encode_request(79, 1, 6, "client", body)[4:] == wire


def test_delete_share_group_offsets_response_has_one_error_per_topic() -> None:
    """Kafka 4.1's layout of DeleteShareGroupOffsets v0 (no partitions), which its admin client reads."""
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "responses": [
            {"topic_name": "orders", "topic_id": TOPIC_ID, "error_code": 0, "error_message": None},
            {"topic_name": "gone", "topic_id": bytes(16), "error_code": 3, "error_message": None},
        ],
    }
    expected = (
        i32(4)
        + b"\x00"  # response header v1
        + i32(0)
        + i16(0)
        + s(None)
        + b"\x03"
        + s("orders")
        + TOPIC_ID
        + i16(0)
        + s(None)
        + b"\x00"  # the topic's tags
        + s("gone")
        + bytes(16)
        + i16(3)  # UNKNOWN_TOPIC_OR_PARTITION
        + s(None)
        + b"\x00"
        + b"\x00"
    )
    assert codec.encode_response(92, 0, 4, body)[4:] == expected
    assert codec.decode_response(92, 0, expected) == (4, body)
