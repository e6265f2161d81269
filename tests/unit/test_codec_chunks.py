"""codec.encode_response_chunks: ``records`` held elsewhere (regions) frame exactly like bytes would."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import codec, fetch_codec
from strom.protocol.codec import RecordsRegion
from strom.protocol.spec import response_spec

FETCH = 1
FETCH_VERSIONS = range(4, response_spec(FETCH).max_version + 1)  # type: ignore[union-attr]


class Held(RecordsRegion):
    """A region whose bytes the test keeps, standing in for storage's file slices."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def _joined(chunks: list[codec.Chunk]) -> bytes:
    return b"".join(c.data if isinstance(c, Held) else bytes(c) for c in chunks)  # type: ignore[arg-type]


def _fetch_body(records: list[list[bytes | Held | None]]) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": f"topic-{t}",
                "partitions": [
                    {
                        "partition_index": i,
                        "error_code": 0,
                        "high_watermark": 100 + i,
                        "last_stable_offset": 100 + i,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": r,
                    }
                    for i, r in enumerate(parts)
                ],
            }
            for t, parts in enumerate(records)
        ],
    }


def _as_bytes(records: list[list[bytes | Held | None]]) -> list[list[bytes | Held | None]]:
    return [[r.data if isinstance(r, Held) else r for r in parts] for parts in records]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_regions_frame_like_the_bytes_they_stand_for(version: int) -> None:
    records: list[list[bytes | Held | None]] = [
        [Held(b"a" * 300), b"inline", Held(b""), None],
        [Held(bytes(range(256)) * 40), Held(b"z")],
    ]
    chunks = codec.encode_response_chunks(FETCH, version, 42, _fetch_body(records))
    expected = codec.encode_response(FETCH, version, 42, _fetch_body(_as_bytes(records)))
    assert _joined(chunks) == expected
    regions = [c for c in chunks if isinstance(c, Held)]
    assert [len(r) for r in regions] == [300, 0, 10240, 1]  # each region a chunk of its own, in order
    assert codec.decode_response(FETCH, version, expected[4:])[0] == 42


def test_without_regions_the_response_is_one_chunk() -> None:
    body = _fetch_body([[b"x" * 10]])
    [chunk] = codec.encode_response_chunks(FETCH, 11, 7, body)
    assert bytes(chunk) == codec.encode_response(FETCH, 11, 7, body)


def test_encode_response_refuses_a_region() -> None:
    with pytest.raises(ValueError, match="cannot encode response"):
        codec.encode_response(FETCH, 11, 7, _fetch_body([[Held(b"x")]]))


_RECORDS = st.one_of(st.none(), st.binary(max_size=64), st.binary(max_size=64).map(Held))  # type: ignore[var-annotated]


@settings(max_examples=60, deadline=None)
@given(
    version=st.sampled_from(FETCH_VERSIONS),
    records=st.lists(st.lists(_RECORDS, max_size=4), max_size=3),
)
def test_any_mix_of_regions_and_bytes(version: int, records: list[list[bytes | Held | None]]) -> None:
    chunks = codec.encode_response_chunks(FETCH, version, 9, _fetch_body(records))
    assert _joined(chunks) == codec.encode_response(FETCH, version, 9, _fetch_body(_as_bytes(records)))


@pytest.mark.parametrize("version", [v for v in FETCH_VERSIONS if v in fetch_codec.FLEXIBLE_VERSIONS])
def test_large_records_in_memory_are_sent_as_they_are(version: int) -> None:
    """Records held in memory (a remote read's) of RECORDS_APART bytes or more are a chunk of their own,
    the very object, not copied into the frame; smaller ones are copied; the bytes are the same."""
    large = bytes(range(256)) * (fetch_codec.RECORDS_APART // 256)
    small = b"s" * 100
    records: list[list[bytes | Held | None]] = [[large, small], [memoryview(large)]]  # type: ignore[list-item]
    for aborted in (None, []):  # both of the flexible encoder's partition paths
        body = _fetch_body(records)
        for topic in body["responses"]:
            for p in topic["partitions"]:
                p["aborted_transactions"] = aborted
        chunks = codec.encode_response_chunks(FETCH, version, 5, body)
        assert b"".join(bytes(c) for c in chunks) == codec.encode_response(FETCH, version, 5, body)  # type: ignore[arg-type]
        apart = [c for c in chunks if c is large or c is records[1][0]]
        assert len(apart) == 2 and not any(c is small for c in chunks)
