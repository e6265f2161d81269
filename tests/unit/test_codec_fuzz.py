"""Decoders fed garbage raise only CorruptFrame or UnsupportedVersion (the codec's exception contract).

Random bytes, random bodies behind a valid header, and mutated valid frames (bit flips, byte
overwrites, insertions, deletions, truncation) for every advertised (api, version) plus the flexible
extras of the oracle test.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_codec_oracle import CASES, sample_body

from strom.protocol import codec
from strom.protocol.codec import CorruptFrame, UnsupportedVersion

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

REQUESTS = [codec.encode_request(k, v, 1, "fuzz", sample_body(k, v, "request"))[4:] for k, v in CASES]
RESPONSES = [(k, v, codec.encode_response(k, v, 1, sample_body(k, v, "response"))[4:]) for k, v in CASES]


def decode_request_safely(payload: bytes) -> None:
    try:
        request = codec.decode_request(payload)
    except (CorruptFrame, UnsupportedVersion):
        return
    assert isinstance(request.body, dict)


def decode_response_safely(api_key: int, version: int, payload: bytes) -> None:
    try:
        _, body = codec.decode_response(api_key, version, payload)
    except (CorruptFrame, UnsupportedVersion):
        return
    assert isinstance(body, dict)


@st.composite
def mutated(draw: st.DrawFn, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:
            del data[pos:]
    return bytes(data)


@FUZZ
@given(st.binary(max_size=512))
def test_decode_request_random_bytes(payload: bytes) -> None:
    decode_request_safely(payload)


@FUZZ
@given(st.sampled_from(CASES), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=256))
def test_decode_request_valid_header_random_body(
    case: tuple[int, int], correlation_id: int, body: bytes
) -> None:
    api_key, version = case
    decode_request_safely(struct.pack(">hhih", api_key, version, correlation_id, -1) + body)


@FUZZ
@given(st.sampled_from(REQUESTS).flatmap(mutated))
def test_decode_request_mutated_frames(payload: bytes) -> None:
    decode_request_safely(payload)


@FUZZ
@given(st.sampled_from(RESPONSES).flatmap(lambda r: st.tuples(st.just(r[0]), st.just(r[1]), mutated(r[2]))))
def test_decode_response_mutated_frames(case: tuple[int, int, bytes]) -> None:
    decode_response_safely(*case)


@FUZZ
@given(st.sampled_from(REQUESTS), st.integers(0, 40))
def test_decode_request_huge_counts(payload: bytes, offset: int) -> None:
    """Length/count fields set to huge values must fail fast, not allocate or loop."""
    for filler in (b"\x7f\xff\xff\xff", b"\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08"):
        position = min(10 + offset, len(payload))
        decode_request_safely(payload[:position] + filler + payload[position + len(filler) :])
