"""The hand-written Produce v3-v8 codec (produce_codec.py) against the generic, spec-generated one.

Requests: for generated bodies, the lean decoding equals the generic decoding converted to the lean
form; for corrupted frames, both either raise CorruptFrame or decode to equal bodies. Responses: for
generated bodies, the lean encoder's bytes are identical to the generic encoder's. Over every version
the broker serves (v0-8): v0-2 reach the lean form through the conversions of produce_codec.py, so the
broker's one form of Produce bodies holds there too.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol import codec
from strom.protocol.api import max_spec_version
from strom.protocol.codec import CorruptFrame
from strom.protocol.produce_codec import (
    FLEXIBLE_LEAN_VERSIONS,
    LEAN_FORM_VERSIONS,
    LEAN_VERSIONS,
    NEW_LEADER_VERSION,
    TOPIC_ID_VERSION,
)

PRODUCE = 0
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

versions = st.sampled_from(list(LEAN_FORM_VERSIONS))
names = st.text(min_size=0, max_size=12)
int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
records = st.one_of(st.none(), st.binary(max_size=80), st.binary(min_size=120, max_size=20_000))
partitions = st.lists(st.fixed_dictionaries({"index": int32, "records": records}), max_size=5)
request_bodies = st.fixed_dictionaries(
    {
        "transactional_id": st.one_of(st.none(), names),
        "acks": int16,
        "timeout_ms": int32,
        "topic_data": st.lists(
            st.fixed_dictionaries({"name": names, "partition_data": partitions}), max_size=4
        ),
    }
)
record_errors = st.lists(st.tuples(int32, st.one_of(st.none(), names)), max_size=3)
leader_hints = st.fixed_dictionaries({"leader_id": int32, "leader_epoch": int32})
partition_results = st.lists(
    st.one_of(
        st.tuples(int32, int16, int64, int64, int64, st.one_of(st.none(), names), record_errors),
        st.tuples(
            int32, int16, int64, int64, int64, st.one_of(st.none(), names), record_errors, leader_hints
        ),
    ),
    max_size=5,
)
node_endpoints = st.lists(
    st.fixed_dictionaries(
        {"node_id": int32, "host": names, "port": int32, "rack": st.one_of(st.none(), names)}
    ),
    max_size=3,
)


@st.composite
def response_bodies(draw: st.DrawFn) -> dict[str, Any]:
    responses = draw(st.lists(st.tuples(names, partition_results), max_size=4))
    body: dict[str, Any] = {"responses": responses, "throttle_time_ms": draw(int32)}
    if draw(st.booleans()):  # v13: the topics' ids; v10+: the new leaders' addresses (KIP-951)
        body["topic_ids"] = [draw(st.binary(min_size=16, max_size=16)) for _ in responses]
        body["node_endpoints"] = draw(node_endpoints)
    return body


def generic_as_lean(body: dict[str, Any], version: int) -> dict[str, Any]:
    by_id = version >= TOPIC_ID_VERSION  # v13: topics named by id, the names left empty
    topics = [
        (
            "" if by_id else t["name"],
            [
                (p["index"], None if p["records"] is None else bytes(p["records"]))
                for p in t["partition_data"]
            ],
        )
        for t in body["topic_data"]
    ]
    # no transactional id before v3: the lean form says None
    transactional_id = body.get("transactional_id") if version >= 3 else None
    lean = {**body, "transactional_id": transactional_id, "topic_data": topics}
    if by_id and topics:
        lean["topic_ids"] = [bytes(t.get("topic_id", bytes(16))) for t in body["topic_data"]]
    return lean


def lean_bytes(body: dict[str, Any]) -> dict[str, Any]:
    topics = [
        (name, [(index, None if data is None else bytes(data)) for index, data in parts])
        for name, parts in body["topic_data"]
    ]
    return {**body, "topic_data": topics}


def lean_as_generic(body: dict[str, Any]) -> dict[str, Any]:
    fields = ("index", "error_code", "base_offset", "log_append_time_ms", "log_start_offset", "error_message")
    ids = body.get("topic_ids") or [bytes(16)] * len(body["responses"])
    generic = {
        "responses": [
            {
                "name": name,
                "topic_id": topic_id,
                "partition_responses": [
                    {
                        **dict(zip(fields, part, strict=False)),
                        "record_errors": [
                            {"batch_index": i, "batch_index_error_message": m} for i, m in part[6]
                        ],
                        **({"current_leader": part[7]} if len(part) > 7 else {}),
                    }
                    for part in parts
                ],
            }
            for (name, parts), topic_id in zip(body["responses"], ids, strict=True)
        ],
        "throttle_time_ms": body["throttle_time_ms"],
    }
    if body.get("node_endpoints"):
        generic["node_endpoints"] = body["node_endpoints"]
    return generic


def decode_both(frame: bytes, version: int) -> tuple[Any, Any]:
    """Each decoder's lean-form body, or the exception class it raised."""
    out = []
    for lean in (False, True):
        try:
            request = codec.decode_request(frame, lean=lean)
        except CorruptFrame as exc:
            out.append(type(exc))
            continue
        body = dict(request.body)
        out.append(lean_bytes(body) if lean else generic_as_lean(body, version))
    return out[0], out[1]


@EXAMPLES
@given(versions, request_bodies)
def test_lean_request_decoding_equals_the_generic(version: int, body: dict[str, Any]) -> None:
    frame = codec.encode_request(PRODUCE, version, 7, "client", body)[4:]
    generic, lean = decode_both(frame, version)
    assert generic == lean
    assert lean == generic_as_lean(body, version)


@EXAMPLES
@given(versions, request_bodies, st.data())
def test_corrupted_requests_fail_alike(version: int, body: dict[str, Any], data: st.DataObject) -> None:
    frame = bytearray(codec.encode_request(PRODUCE, version, 7, "client", body)[4:])
    header = 2 + 2 + 4 + 2 + len("client")  # the request header stays: the body is what is tested
    if len(frame) > header:
        for _ in range(data.draw(st.integers(1, 3))):
            action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
            at = data.draw(st.integers(header, max(header, len(frame) - 1)))
            if action == "flip" and at < len(frame):
                frame[at] ^= data.draw(st.integers(1, 255))
            elif action == "cut":
                del frame[at:]
            else:
                frame[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    generic, lean = decode_both(bytes(frame), version)
    assert generic == lean


@EXAMPLES
@given(versions, response_bodies())
def test_lean_response_bytes_equal_the_generic(version: int, body: dict[str, Any]) -> None:
    if version < NEW_LEADER_VERSION:  # the handler adds leader hints from v10 only (KIP-951)
        body = {
            **body,
            "responses": [(name, [part[:7] for part in parts]) for name, parts in body["responses"]],
        }
    lean = codec.encode_response_chunks(PRODUCE, version, 9, body, lean=True)
    generic = codec.encode_response(PRODUCE, version, 9, lean_as_generic(body))
    assert b"".join(bytes(c) for c in lean) == generic  # type: ignore[arg-type]


def test_the_fast_path_covers_v3_to_v13_and_the_lean_form_every_version() -> None:
    assert set(LEAN_VERSIONS) == {3, 4, 5, 6, 7, 8}
    assert set(FLEXIBLE_LEAN_VERSIONS) == {9, 10, 11, 12, 13}
    assert set(LEAN_FORM_VERSIONS) == set(range(max_spec_version(PRODUCE) + 1))


def test_flexible_versions_convert_topic_ids_and_leader_hints() -> None:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5,
        "topic_data": [
            {"name": "t", "topic_id": b"i" * 16, "partition_data": [{"index": 0, "records": b"x"}]}
        ],
    }
    frame = codec.encode_request(PRODUCE, 9, 7, "client", body)[4:]
    assert codec.decode_request(frame, lean=True).body["topic_data"][0][0] == "t"
    frame = codec.encode_request(PRODUCE, 13, 7, "client", body)[4:]
    lean = codec.decode_request(frame, lean=True).body
    assert (lean["topic_data"][0][0], lean["topic_ids"]) == ("", [b"i" * 16])
    hint = {"leader_id": 2, "leader_epoch": 7}
    endpoints = [{"node_id": 2, "host": "h", "port": 9, "rack": None}]
    response = {
        "responses": [("", [[0, 6, -1, -1, -1, None, (), hint]])],
        "throttle_time_ms": 0,
        "topic_ids": [b"i" * 16],
        "node_endpoints": endpoints,
    }
    frame = b"".join(bytes(c) for c in codec.encode_response_chunks(PRODUCE, 13, 9, response, lean=True))  # type: ignore[arg-type]
    _, decoded = codec.decode_response(PRODUCE, 13, frame[4:])
    (topic,) = decoded["responses"]
    assert topic["topic_id"] == b"i" * 16
    assert topic["partition_responses"][0]["current_leader"] == hint
    assert decoded["node_endpoints"] == endpoints
