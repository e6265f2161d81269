"""__consumer_offsets record layouts, group partitioning and the group state table."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for,
)
from strom.coordinator.state import VALID_PREVIOUS, GroupState, IllegalStateTransition, check_transition


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),  # the classic String whose hashCode is Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair is two UTF-16 code units
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_partition_for_matches_kafka_utils_abs() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("my-group", 1) == 0
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(100))


def test_offset_commit_round_trip() -> None:
    key = OffsetCommitKey("group", "topic", 3)
    value = OffsetCommitValue(42, 5, "meta", 1_700_000_000_000)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    # Layout pinned: key version 1, group, topic, partition (Kafka's OffsetCommitKey v1).
    assert encode_key(key) == b"\x00\x01\x00\x05group\x00\x05topic\x00\x00\x00\x03"


def test_group_metadata_round_trip() -> None:
    key = GroupMetadataKey("g")
    member = MemberRecord("m-1", "inst", "client", "/127.0.0.1", 300000, 10000, b"\x00sub", b"\x00asg")
    value = GroupMetadataValue("consumer", 7, "range", "m-1", 123, (member,))
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    empty = GroupMetadataValue("consumer", 8, None, None, 124, ())
    assert decode_value(key, encode_value(empty)) == empty


def test_unknown_versions_and_garbage_are_refused() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x09\x00\x01g")
    key = OffsetCommitKey("g", "t", 0)
    with pytest.raises(RecordFormatError):
        decode_value(key, b"\x00\x63" + bytes(20))
    with pytest.raises(RecordFormatError):
        decode_value(key, encode_value(OffsetCommitValue(1, -1, "", 0))[:-1])
    with pytest.raises(RecordFormatError):
        decode_key(encode_key(key) + b"x")


@given(st.binary(max_size=64))
def test_decoders_raise_only_record_format_error(data: bytes) -> None:
    try:
        key = decode_key(data)
    except RecordFormatError:
        return
    with contextlib.suppress(RecordFormatError):
        decode_value(key, data)


def test_state_table() -> None:
    check_transition("g", GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
    check_transition("g", GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
    check_transition("g", GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
    check_transition("g", GroupState.STABLE, GroupState.PREPARING_REBALANCE)
    with pytest.raises(IllegalStateTransition):
        check_transition("g", GroupState.EMPTY, GroupState.STABLE)
    with pytest.raises(IllegalStateTransition):
        check_transition("g", GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
    with pytest.raises(IllegalStateTransition):
        check_transition("g", GroupState.DEAD, GroupState.EMPTY)
    assert set(VALID_PREVIOUS) == set(GroupState)
