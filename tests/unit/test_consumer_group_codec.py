"""Golden encodings of KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe (which kafka-python's
specs lack), written out byte by byte from the protocol's flexible encoding: compact strings and arrays
(unsigned varint length + 1, 0 for null), uuids as 16 raw bytes, an empty tagged-field section (0)
after every struct, request header v2 and response header v1."""

from __future__ import annotations

import struct
import uuid

from strom.protocol import codec
from strom.protocol.api import ApiKey

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff").bytes


def s(text: str | None) -> bytes:
    """A compact (nullable) string."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def heartbeat_request_v1() -> bytes:
    return (
        i16(68)
        + i16(1)
        + i32(7)
        + i16(6)
        + b"client"
        + b"\x00"  # header v2: client id stays int16-sized
        + s("g")
        + s("m-1")
        + i32(3)
        + s("host-1")
        + s(None)
        + i32(-1)
        + b"\x02"
        + s("orders")  # SubscribedTopicNames: 1 name
        + s("^ord.*")  # SubscribedTopicRegex (v1)
        + s("uniform")
        + b"\x02"
        + TOPIC_ID
        + b"\x03"
        + i32(0)
        + i32(4)
        + b"\x00"  # TopicPartitions: 1 topic, [0, 4]
        + b"\x00"
    )


def test_heartbeat_request_v1_decodes_from_the_wire_layout() -> None:
    request = codec.decode_request(heartbeat_request_v1())
    assert (request.api_key, request.api_version, request.correlation_id) == (68, 1, 7)
    body = request.body
    assert (body["group_id"], body["member_id"], body["member_epoch"]) == ("g", "m-1", 3)
    assert (body["instance_id"], body["rack_id"], body["rebalance_timeout_ms"]) == ("host-1", None, -1)
    assert body["subscribed_topic_names"] == ["orders"] and body["subscribed_topic_regex"] == "^ord.*"
    assert body["server_assignor"] == "uniform"
    assert [(bytes(tp["topic_id"]), list(tp["partitions"])) for tp in body["topic_partitions"]] == [
        (TOPIC_ID, [0, 4])
    ]
    assert codec.encode_request(68, 1, 7, "client", body)[4:] == heartbeat_request_v1()


def test_heartbeat_request_v0_has_no_regex_and_null_arrays() -> None:
    wire = (
        i16(68)
        + i16(0)
        + i32(1)
        + i16(-1)
        + b"\x00"
        + s("g")
        + s("")
        + i32(0)
        + s(None)
        + s(None)
        + i32(300_000)
        + b"\x01"
        + s(None)
        + b"\x00"
        + b"\x00"
    )
    body = codec.decode_request(wire).body
    assert body["subscribed_topic_names"] == [] and body["topic_partitions"] is None
    assert "subscribed_topic_regex" not in body


def test_heartbeat_response_layout() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": "m-1",
        "member_epoch": 5,
        "heartbeat_interval_ms": 500,
        "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [1, 2]}]},
    }
    frame = codec.encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, 9, body)
    expected = (
        i32(9)
        + b"\x00"  # response header v1
        + i32(0)
        + i16(0)
        + s(None)
        + s("m-1")
        + i32(5)
        + i32(500)
        + b"\x01"  # Assignment present (a nullable struct's marker)
        + b"\x02"
        + TOPIC_ID
        + b"\x03"
        + i32(1)
        + i32(2)
        + b"\x00"
        + b"\x00"  # Assignment's tagged fields
        + b"\x00"
    )
    assert bytes(frame[4:]) == expected
    without = codec.encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, 9, {**body, "assignment": None})
    assert bytes(without[4:]).endswith(i32(500) + b"\xff" + b"\x00")


def test_describe_request_and_response_layout() -> None:
    wire = i16(69) + i16(0) + i32(2) + i16(-1) + b"\x00" + b"\x02" + s("g") + b"\x00" + b"\x00"
    assert codec.decode_request(wire).body == {"group_ids": ["g"], "include_authorized_operations": False}
    member = {
        "member_id": "m",
        "instance_id": None,
        "rack_id": None,
        "member_epoch": 2,
        "client_id": "c",
        "client_host": "/h",
        "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None,
        "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "topic_name": "t", "partitions": [0]}]},
        "target_assignment": {"topic_partitions": []},
        "member_type": 1,
    }
    group = {
        "error_code": 0,
        "error_message": None,
        "group_id": "g",
        "group_state": "Stable",
        "group_epoch": 2,
        "assignment_epoch": 2,
        "assignor_name": "uniform",
        "members": [member],
        "authorized_operations": -(2**31),
    }
    frame = codec.encode_response(
        ApiKey.CONSUMER_GROUP_DESCRIBE, 1, 3, {"throttle_time_ms": 0, "groups": [group]}
    )
    expected_member = (
        s("m")
        + s(None)
        + s(None)
        + i32(2)
        + s("c")
        + s("/h")
        + b"\x02"
        + s("t")
        + s(None)
        + b"\x02"
        + TOPIC_ID
        + s("t")
        + b"\x02"
        + i32(0)
        + b"\x00"
        + b"\x00"  # assignment
        + b"\x01"
        + b"\x00"  # target assignment: no topics
        + b"\x01"  # MemberType (v1)
        + b"\x00"
    )
    expected = (
        i32(3)
        + b"\x00"
        + i32(0)
        + b"\x02"
        + i16(0)
        + s(None)
        + s("g")
        + s("Stable")
        + i32(2)
        + i32(2)
        + s("uniform")
        + b"\x02"
        + expected_member
        + i32(-(2**31))
        + b"\x00"
        + b"\x00"
    )
    assert bytes(frame[4:]) == expected
