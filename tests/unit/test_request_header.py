"""The request header (strom.protocol.request_header): v1 and v2 layouts, client ids, tagged fields,
and the error contract (only CorruptFrame) for garbage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import codec
from strom.protocol.api import ApiKey
from strom.protocol.errors import CorruptFrame
from strom.protocol.request_header import (
    encode_request_header,
    peek_request_header,
    read_request_header,
    skip_tagged_fields,
)


def frame(client_id: str | None, flexible: bool, body: bytes = b"") -> memoryview:
    return memoryview(bytes(encode_request_header(0, 9, 1234, client_id, flexible)[4:]) + body)


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "ünïcode-client"])
def test_a_header_reads_back_as_written(client_id: str | None, flexible: bool) -> None:
    buf = frame(client_id, flexible, b"BODY")
    assert peek_request_header(buf) == (0, 9, 1234)
    *prefix, got, pos = read_request_header(buf)
    assert (tuple(prefix), got) == ((0, 9, 1234), client_id)
    if flexible:
        pos = skip_tagged_fields(buf, pos)
    assert bytes(buf[pos:]) == b"BODY"


def test_header_v2_skips_tagged_fields_it_does_not_know() -> None:
    # Two tags (0: 3 bytes, 5: 1 byte) after the client id, then the body.
    buf = memoryview(struct.pack(">hhih", 18, 3, 7, 2) + b"id" + bytes([2, 0, 3, 1, 2, 3, 5, 1, 9]) + b"B")
    _, _, _, client_id, pos = read_request_header(buf)
    assert (client_id, pos) == ("id", 12)
    assert bytes(buf[skip_tagged_fields(buf, pos) :]) == b"B"


def test_the_codec_reads_its_requests_through_the_header_module() -> None:
    payload = codec.encode_request(
        int(ApiKey.API_VERSIONS), 3, 42, "me", {"client_software_name": "n", "client_software_version": "1"}
    )[4:]
    request = codec.decode_request(payload)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (
        18,
        3,
        42,
        "me",
    )
    assert peek_request_header(payload) == (18, 3, 42)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x00\x00\x09\x00\x00\x04",  # 7 bytes: no whole prefix
        struct.pack(">hhi", 0, 9, 1),  # no client id length
        struct.pack(">hhih", 0, 9, 1, -2),  # length below -1
        struct.pack(">hhih", 0, 9, 1, 5) + b"abc",  # client id past the end
        struct.pack(">hhih", 0, 9, 1, 2) + b"\xff\xfe",  # not UTF-8
    ],
)
def test_a_header_that_does_not_parse_is_a_corrupt_frame(raw: bytes) -> None:
    with pytest.raises(CorruptFrame):
        read_request_header(memoryview(raw))
    if len(raw) < 8:
        with pytest.raises(CorruptFrame):
            peek_request_header(raw)


@pytest.mark.parametrize(
    "tags",
    [
        b"",  # v2 without its tagged section
        bytes([1, 0, 9, 1]),  # a tag longer than the frame
        bytes([0xFF] * 6),  # a varint past 5 bytes
    ],
)
def test_a_broken_tagged_section_is_a_corrupt_frame_of_the_codec(tags: bytes) -> None:
    # ApiVersions v3 is flexible: header v2.
    with pytest.raises(CorruptFrame):
        codec.decode_request(struct.pack(">hhih", int(ApiKey.API_VERSIONS), 3, 1, -1) + tags)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_random_bytes_raise_only_corrupt_frame(raw: bytes) -> None:
    try:
        api_key, api_version, correlation_id, client_id, pos = read_request_header(memoryview(raw))
    except CorruptFrame:
        return
    assert peek_request_header(raw) == (api_key, api_version, correlation_id)
    assert client_id is None or isinstance(client_id, str)
    assert 10 <= pos <= len(raw)
