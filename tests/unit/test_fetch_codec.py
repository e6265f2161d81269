"""The hand-written flexible Fetch codec (fetch_codec.py) against the generic, spec-generated one.

At every flexible version (v12-v18): for generated request bodies (tagged fields and long lengths
included), whenever the hand-written decoder reads a frame its dict and end position equal the
generated decoder's, and it reads every frame of the common shape; for corrupted frames it either
declines or agrees with the generated decoder. For generated response bodies (aborted transactions,
tagged structs at and off their defaults, fields left out, long records, node endpoints), its bytes
are identical to the generated encoder's, regions included.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol import codec, fetch_codec
from strom.protocol.api import max_spec_version
from strom.protocol.codegen import Decoder, Encoder, compile_decoder, compile_encoder
from strom.protocol.primitives import RecordsRegion
from strom.protocol.spec import request_spec, response_spec

FETCH = 1
VERSIONS = list(fetch_codec.FLEXIBLE_VERSIONS)
EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEADER = 2 + 2 + 4 + 2 + len("client") + 1  # request header v2: the body starts after its tags

versions = st.sampled_from(VERSIONS)
int8 = st.integers(-(1 << 7), (1 << 7) - 1)
int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
uuids = st.binary(min_size=16, max_size=16)
short_names = st.text(max_size=12)
names = st.one_of(short_names, st.text(min_size=120, max_size=200))  # one or two length bytes
few = {"max_size": 4}


def _long(element: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """127-129 copies of one element: a two-byte compact length, cheap to generate."""
    return st.builds(lambda item, count: [item] * count, element, st.integers(127, 129))


def _some(element: st.SearchStrategy[Any], long_too: bool) -> st.SearchStrategy[list[Any]]:
    """Short lists, sometimes one of more than 127 elements."""
    short = st.lists(element, **few)
    return st.one_of(short, _long(element)) if long_too else short


fetch_partitions = st.fixed_dictionaries(
    {
        "partition": int32,
        "current_leader_epoch": int32,
        "fetch_offset": int64,
        "last_fetched_epoch": int32,
        "log_start_offset": int64,
        "partition_max_bytes": int32,
    },
    optional={"replica_directory_id": uuids, "high_watermark": int64},  # tagged, v17+ / v18+
)
fetch_topics = st.fixed_dictionaries(
    {"topic": names, "topic_id": uuids, "partitions": _some(fetch_partitions, long_too=True)}
)
one_partition_topics = st.fixed_dictionaries(
    {"topic": short_names, "topic_id": uuids, "partitions": st.lists(fetch_partitions, max_size=1)}
)
forgotten = st.fixed_dictionaries({"topic": names, "topic_id": uuids, "partitions": st.lists(int32, **few)})
request_bodies = st.fixed_dictionaries(
    {
        "replica_id": int32,
        "max_wait_ms": int32,
        "min_bytes": int32,
        "max_bytes": int32,
        "isolation_level": int8,
        "session_id": int32,
        "session_epoch": int32,
        "topics": st.one_of(st.lists(fetch_topics, **few), _long(one_partition_topics)),
        "forgotten_topics_data": st.lists(forgotten, **few),
        "rack_id": names,
    },
    optional={
        "cluster_id": st.one_of(st.none(), short_names),  # tagged
        "replica_state": st.fixed_dictionaries({"replica_id": int32, "replica_epoch": int64}),  # v15+
    },
)

records = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=127, max_size=300))
aborted = st.one_of(
    st.none(), st.lists(st.fixed_dictionaries({"producer_id": int64, "first_offset": int64}), **few)
)
minus_one_or = st.one_of(st.just(-1), int32)
response_partitions = st.fixed_dictionaries(
    {
        "partition_index": int32,
        "error_code": int16,
        "high_watermark": int64,
        "records": records,
    },
    optional={
        "last_stable_offset": int64,
        "log_start_offset": int64,
        "aborted_transactions": aborted,
        "preferred_read_replica": int32,
        # tagged structs, at or off their defaults, some fields left out
        "diverging_epoch": st.one_of(
            st.none(), st.fixed_dictionaries({}, optional={"epoch": minus_one_or, "end_offset": int64})
        ),
        "current_leader": st.one_of(
            st.none(),
            st.fixed_dictionaries({"leader_id": minus_one_or, "leader_epoch": minus_one_or}),
        ),
        "snapshot_id": st.one_of(
            st.none(), st.fixed_dictionaries({}, optional={"end_offset": int64, "epoch": minus_one_or})
        ),
    },
)
response_topics = st.fixed_dictionaries(
    {"topic": names, "topic_id": uuids, "partitions": _some(response_partitions, long_too=False)}
)
node_endpoints = st.lists(
    st.fixed_dictionaries(
        {"node_id": int32, "host": names, "port": int32, "rack": st.one_of(st.none(), short_names)}
    ),
    **few,
)
response_bodies = st.fixed_dictionaries(
    {
        "throttle_time_ms": int32,
        "error_code": int16,
        "session_id": int32,
        "responses": st.lists(response_topics, **few),
    },
    optional={"node_endpoints": node_endpoints},
)


@functools.cache
def _generic_decoder(version: int) -> Decoder:
    return compile_decoder(request_spec(FETCH), version)  # type: ignore[arg-type]


@functools.cache
def _generic_encoder(version: int) -> Encoder:
    return compile_encoder(response_spec(FETCH), version)  # type: ignore[arg-type]


def _generic_decode(frame: bytes, version: int) -> Any:
    """The generated decoder's (body, end) for the body of ``frame``, or the class of its error."""
    try:
        return _generic_decoder(version)(memoryview(frame), HEADER)
    except (ValueError, IndexError, OverflowError, TypeError, struct.error) as exc:
        return type(exc)


def _common_shape(body: dict[str, Any], version: int) -> bool:
    """Whether the hand-written decoder must read this body itself (no tags, one-byte lengths)."""
    if body.get("cluster_id") is not None:
        return False
    state = body.get("replica_state", {})
    if version >= fetch_codec.REPLICA_STATE_VERSION and (
        state.get("replica_id", -1),
        state.get("replica_epoch", -1),
    ) != (-1, -1):
        return False
    by_id = version >= fetch_codec.TOPIC_ID_VERSION
    entries = [*body["topics"], *body["forgotten_topics_data"]]
    if len(body["topics"]) >= 127 or len(body["rack_id"].encode()) >= 127:
        return False
    for entry in entries:
        if not by_id and len(entry["topic"].encode()) >= 127:
            return False
        if len(entry["partitions"]) >= 127:
            return False
    partitions = [p for t in body["topics"] for p in t["partitions"]]
    if version >= 17 and any(p.get("replica_directory_id", bytes(16)) != bytes(16) for p in partitions):
        return False
    return not (
        version >= 18 and any(p.get("high_watermark", (1 << 63) - 1) != (1 << 63) - 1 for p in partitions)
    )


@EXAMPLES
@given(versions, request_bodies)
def test_request_decoding_equals_the_generic(version: int, body: dict[str, Any]) -> None:
    frame = codec.encode_request(FETCH, version, 7, "client", body)[4:]
    generic = _generic_decode(frame, version)
    lean = fetch_codec.decode_request(memoryview(frame), HEADER, version)
    if lean is not None:
        assert lean == generic
    assert (lean is not None) == _common_shape(body, version)
    assert codec.decode_request(frame).body == generic[0]


@EXAMPLES
@given(versions, request_bodies, st.data())
def test_corrupted_requests_are_declined_or_read_alike(
    version: int, body: dict[str, Any], data: st.DataObject
) -> None:
    frame = bytearray(codec.encode_request(FETCH, version, 7, "client", body)[4:])
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(HEADER, max(HEADER, len(frame) - 1)))
        if action == "flip" and at < len(frame):
            frame[at] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del frame[at:]
        else:
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    lean = fetch_codec.decode_request(memoryview(frame), HEADER, version)
    if lean is not None:
        assert lean == _generic_decode(bytes(frame), version)


def _both_encodings(body: dict[str, Any], version: int) -> tuple[bytes, bytes]:
    generic = bytearray()
    _generic_encoder(version)(body, generic)
    lean = bytearray()
    fetch_codec.encode_response(body, lean, version)
    return bytes(generic), bytes(lean)


@EXAMPLES
@given(versions, response_bodies)
def test_response_bytes_equal_the_generic(version: int, body: dict[str, Any]) -> None:
    generic, lean = _both_encodings(body, version)
    assert lean == generic


def test_a_partition_with_two_hundred_aborted_transactions_and_many_partitions() -> None:
    part = {
        "partition_index": 1,
        "error_code": 0,
        "high_watermark": 9,
        "aborted_transactions": [{"producer_id": i, "first_offset": i} for i in range(200)],
        "records": b"r" * 20_000,
    }
    many = [
        {"partition_index": i, "error_code": 0, "high_watermark": i, "aborted_transactions": None}
        for i in range(300)
    ]
    body = {"responses": [{"topic": "t", "topic_id": b"i" * 16, "partitions": [part, *many]}]}
    for version in VERSIONS:
        generic, lean = _both_encodings(body, version)
        assert lean == generic


class _Region(RecordsRegion):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def test_records_regions_are_noted_where_the_generic_encoder_notes_them() -> None:
    region = _Region(300)
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 5, "aborted_transactions": None}
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "topic_id": b"i" * 16, "partitions": [{**part, "records": region}]}],
    }
    for version in VERSIONS:
        chunks = codec.encode_response_chunks(FETCH, version, 9, body)
        assert region in chunks
        framed = b"".join(b"\0" * len(c) if c is region else bytes(c) for c in chunks)  # type: ignore[arg-type]
        filled = {
            **body,
            "responses": [{**body["responses"][0], "partitions": [{**part, "records": b"\0" * 300}]}],
        }
        generic = bytearray()
        _generic_encoder(version)(filled, generic)
        assert framed == struct.pack(">ii", 4 + 1 + len(generic), 9) + b"\0" + bytes(generic)


def test_every_flexible_version_is_served_here() -> None:
    assert set(VERSIONS) == set(range(12, max_spec_version(FETCH) + 1))
    assert response_spec(FETCH).flexible(12)  # type: ignore[union-attr]
    assert not response_spec(FETCH).flexible(11)  # type: ignore[union-attr]
