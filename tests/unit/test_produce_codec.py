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
from strom.protocol.codec import CorruptFrame
from strom.protocol.produce_codec import LEAN_FORM_VERSIONS, LEAN_VERSIONS

PRODUCE = 0
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

versions = st.sampled_from(list(LEAN_FORM_VERSIONS))
names = st.text(min_size=0, max_size=12)
int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
records = st.one_of(st.none(), st.binary(max_size=80))
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
partition_results = st.lists(
    st.tuples(int32, int16, int64, int64, int64, st.one_of(st.none(), names), record_errors), max_size=5
)
response_bodies = st.fixed_dictionaries(
    {"responses": st.lists(st.tuples(names, partition_results), max_size=4), "throttle_time_ms": int32}
)


def generic_as_lean(body: dict[str, Any], version: int) -> dict[str, Any]:
    topics = [
        (
            t["name"],
            [
                (p["index"], None if p["records"] is None else bytes(p["records"]))
                for p in t["partition_data"]
            ],
        )
        for t in body["topic_data"]
    ]
    # no transactional id before v3: the lean form says None
    transactional_id = body.get("transactional_id") if version >= 3 else None
    return {**body, "transactional_id": transactional_id, "topic_data": topics}


def lean_bytes(body: dict[str, Any]) -> dict[str, Any]:
    topics = [
        (name, [(index, None if data is None else bytes(data)) for index, data in parts])
        for name, parts in body["topic_data"]
    ]
    return {**body, "topic_data": topics}


def lean_as_generic(body: dict[str, Any]) -> dict[str, Any]:
    fields = ("index", "error_code", "base_offset", "log_append_time_ms", "log_start_offset", "error_message")
    return {
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        **dict(zip(fields, part, strict=False)),
                        "record_errors": [
                            {"batch_index": i, "batch_index_error_message": m} for i, m in part[6]
                        ],
                    }
                    for part in parts
                ],
            }
            for name, parts in body["responses"]
        ],
        "throttle_time_ms": body["throttle_time_ms"],
    }


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
@given(versions, response_bodies)
def test_lean_response_bytes_equal_the_generic(version: int, body: dict[str, Any]) -> None:
    lean = codec.encode_response_chunks(PRODUCE, version, 9, body, lean=True)
    generic = codec.encode_response(PRODUCE, version, 9, lean_as_generic(body))
    assert b"".join(bytes(c) for c in lean) == generic  # type: ignore[arg-type]


def test_the_fast_path_covers_v3_to_v8_and_the_lean_form_v0_to_v8() -> None:
    assert set(LEAN_VERSIONS) == {3, 4, 5, 6, 7, 8}
    assert set(LEAN_FORM_VERSIONS) == set(range(9))


def test_versions_the_broker_does_not_serve_keep_the_generic_form() -> None:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}],
    }
    frame = codec.encode_request(PRODUCE, 9, 7, "client", body)[4:]
    assert codec.decode_request(frame, lean=True).body["topic_data"][0]["name"] == "t"
    frame = codec.encode_request(PRODUCE, 2, 7, "client", body)[4:]
    assert codec.decode_request(frame, lean=True).body["topic_data"][0][0] == "t"
