"""Kafka request/response codec, compiled from the JSON message specs.

Theory of operation. For each ``(api_key, version, request|response, encode|decode)`` used, the
Python source of one straight-line function is generated from :mod:`strom.protocol.spec` (see
codegen.py), compiled and cached (first use only; nothing is written to disk or copied into the repo).
At run time there is no per-field interpretation. Three things concern the callers:

* ``records`` decode to a ``memoryview`` slice of the frame (zero copy); other bytes are copied;
* a ``records`` value may also be a :class:`RecordsRegion` (bytes held elsewhere, e.g. a file range):
  :func:`encode_response_chunks` then returns the response as chunks, the encoded bytes around each
  region and the region itself, and the I/O driver sends the region's bytes (``sendfile``); this module
  never sees them;
* ``lean=True`` (the broker's server): Produce v3-v13 requests decode to, and their responses encode
  from, the tuples of produce_codec.py instead of dicts (the same bytes; a dict per partition entry is
  a measurable cost when a request carries a thousand partitions); v0-2, which only the generic codec
  reads, are converted to and from that form, so the broker sees one form of Produce bodies;
* flexible Fetch requests and responses (v12-v18) are read and written by fetch_codec.py, the same
  dicts and bytes with less work per partition (a request it does not read is left to the generated
  decoder), whatever ``lean`` says.

Bodies are plain dicts; their types are the ``TypedDict``s of messages.py (generated from the same
specs), which the callers name: the codec is keyed by numbers known only at run time.

Headers (docs/protocol.md#wire-basics): the request header (v1, or v2 with a tagged section for
flexible API versions) is read and written by request_header.py; this module tells it which of the two
a request carries. Response header v0 = ``correlation_id``; v1 adds a tagged section -- except
ApiVersions responses, which always use v0. An ApiVersions response with a non-zero error code has a
v0 body whatever the requested version (what clients parse after UNSUPPORTED_VERSION).

Error contract: the decoders raise only :class:`CorruptFrame` (anything that does not parse, including
trailing bytes: Kafka ignores nothing) and :class:`UnsupportedVersion` (API key unknown to the specs,
or version above the spec maximum). Encoders raise ``ValueError`` for values that do not fit the
version's layout, and :class:`UnsupportedVersion` like the decoders. All functions are pure and
thread-safe (the compile cache is a dict filled idempotently).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.protocol import fetch_codec
from strom.protocol.codegen import Decoder, Encoder, compile_decoder, compile_encoder
from strom.protocol.errors import CorruptFrame, UnsupportedVersion
from strom.protocol.primitives import RecordsRegion
from strom.protocol.produce_codec import (
    FLEXIBLE_LEAN_VERSIONS,
    LEAN_FORM_VERSIONS,
    LEAN_VERSIONS,
    TOPIC_ID_VERSION,
    decode_flexible_request,
    decode_produce_request,
    encode_flexible_response,
    encode_produce_response,
    generic_response,
    lean_request,
)
from strom.protocol.request_header import (
    encode_request_header,
    read_request_header,
    skip_tagged_fields,
)
from strom.protocol.spec import MessageSpec, request_spec, response_spec

__all__ = [
    "Chunk",
    "CorruptFrame",
    "RecordsRegion",
    "Request",
    "UnsupportedVersion",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_chunks",
    "generated_source",
]

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0
FETCH_KEY = 1

# One piece of an encoded response: encoded bytes, or a region whose bytes the I/O driver sends.
Chunk = bytes | bytearray | memoryview | RecordsRegion


class _ChunkedOut(bytearray):
    """An encoder's output that also notes where each `RecordsRegion` belongs: (position, region); and
    large records held in memory, sent as they are instead of copied in (fetch_codec.RECORDS_APART)."""

    __slots__ = ("regions",)

    def __init__(self, initial: bytes) -> None:
        super().__init__(initial)
        self.regions: list[tuple[int, RecordsRegion | bytes | memoryview]] = []


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request: header fields plus the body (the API's request TypedDict of messages.py)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Mapping[str, Any]


# ----------------------------------------------------------------------------------------------
# Compiled-function caches and the public API

# (api_key, version, is_request) -> (compiled function, header is flexible)
_DECODERS: dict[tuple[int, int, bool], tuple[Decoder, bool]] = {}
_ENCODERS: dict[tuple[int, int, bool], tuple[Encoder, bool]] = {}
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")  # a response's error code
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_CORRUPT = (struct.error, ValueError, IndexError, OverflowError, TypeError)
_ENCODE_ERRORS = (struct.error, ValueError, TypeError, AttributeError, OverflowError, UnicodeError)


def _spec_for(api_key: int, version: int, is_request: bool, correlation_id: int) -> tuple[MessageSpec, bool]:
    """The spec and whether the header is flexible; UnsupportedVersion if the specs do not describe it."""
    spec = request_spec(api_key) if is_request else response_spec(api_key)
    if spec is None or not 0 <= version <= spec.max_version:
        raise UnsupportedVersion(api_key, version, correlation_id)
    return spec, spec.flexible(version) and (is_request or api_key != API_VERSIONS_KEY)


def _decoder(api_key: int, version: int, is_request: bool, correlation_id: int) -> tuple[Decoder, bool]:
    spec, flexible = _spec_for(api_key, version, is_request, correlation_id)
    entry = _DECODERS[(api_key, version, is_request)] = (compile_decoder(spec, version), flexible)
    return entry


def _encoder(api_key: int, version: int, is_request: bool, correlation_id: int) -> tuple[Encoder, bool]:
    spec, flexible = _spec_for(api_key, version, is_request, correlation_id)
    entry = _ENCODERS[(api_key, version, is_request)] = (compile_encoder(spec, version), flexible)
    return entry


def _as_view(payload: bytes | bytearray | memoryview) -> memoryview:
    if type(payload) is bytes:
        return memoryview(payload)
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def decode_request(payload: bytes | bytearray | memoryview, lean: bool = False) -> Request:
    """Decode one request frame (without its 4-byte size prefix); ``lean``: a Produce v0-v8 body in
    the lean form of produce_codec.py (the broker's), else the generic dicts.

    Raises:
        UnsupportedVersion: unknown API key, or a version above the spec maximum.
        CorruptFrame: anything else that does not parse, including trailing bytes.
    """
    buf = _as_view(payload)
    api_key, version, correlation_id, client_id, pos = read_request_header(buf)
    decoder, flexible = _DECODERS.get((api_key, version, True)) or _decoder(
        api_key, version, True, correlation_id
    )
    try:
        if flexible:  # header v2; its tagged-field section is nearly always empty (one zero byte)
            pos = pos + 1 if buf[pos] == 0 else skip_tagged_fields(buf, pos)
        body: Mapping[str, Any]
        if lean and api_key == PRODUCE_KEY and version in LEAN_FORM_VERSIONS:
            if version in LEAN_VERSIONS:
                body, pos = decode_produce_request(buf, pos)
            elif version in FLEXIBLE_LEAN_VERSIONS:
                body, pos = decode_flexible_request(buf, pos, version >= TOPIC_ID_VERSION)
            else:
                generic, pos = decoder(buf, pos)
                body = lean_request(generic)
        elif api_key == FETCH_KEY and version in fetch_codec.FLEXIBLE_VERSIONS:
            read = fetch_codec.decode_request(buf, pos, version)
            body, pos = read if read is not None else decoder(buf, pos)
        else:
            body, pos = decoder(buf, pos)
    except _CORRUPT as exc:
        raise CorruptFrame(f"api_key={api_key} v{version}: {exc}") from exc
    if pos != len(buf) and not (flexible and _tagged_trailer(buf, pos)):
        raise CorruptFrame(f"api_key={api_key} v{version}: {len(buf) - pos} bytes left over")
    return Request(api_key, version, correlation_id, client_id, body)


def _tagged_trailer(buf: memoryview, pos: int) -> bool:
    """Whether the bytes after a flexible request's body are exactly one more tagged-field section.

    librdkafka 2.16 sends such a trailer: AlterUserScramCredentials ends with an extra empty section
    (one zero byte), and Metadata v13 for all topics with a section holding one empty tag
    (``01 00 00``). Kafka's parser ignores bytes after the message, so these are accepted; any other
    trailer is still a corrupt frame.
    """
    try:
        return skip_tagged_fields(buf, pos) == len(buf)
    except (ValueError, IndexError):
        return False


def _encode_response_into(
    out: bytearray, api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any], lean: bool
) -> None:
    """Append the response header and body to ``out``, which starts with a 4-byte size placeholder."""
    if api_key == API_VERSIONS_KEY and body.get("error_code", 0) != 0:
        api_version = 0  # clients re-parse a failed ApiVersions response as v0
    encoder, flexible = _ENCODERS.get((api_key, api_version, False)) or _encoder(
        api_key, api_version, False, correlation_id
    )
    if flexible:
        out.append(0)  # empty tagged-field section of response header v1
    try:
        if lean and api_key == PRODUCE_KEY and api_version in LEAN_FORM_VERSIONS:
            if api_version in LEAN_VERSIONS:
                encode_produce_response(body, out, api_version)
            elif api_version in FLEXIBLE_LEAN_VERSIONS:
                encode_flexible_response(body, out, api_version)
            else:
                encoder(generic_response(body), out)
        elif api_key == FETCH_KEY and api_version in fetch_codec.FLEXIBLE_VERSIONS:
            fetch_codec.encode_response(body, out, api_version)
        else:
            encoder(body, out)
    except _ENCODE_ERRORS as exc:
        raise ValueError(f"cannot encode response api_key={api_key} v{api_version}: {exc!r}") from exc


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    """Encode a whole response frame, size prefix included (every ``records`` value held in memory).

    Raises:
        UnsupportedVersion: unknown API key or version.
        ValueError: a value does not fit the version's layout, or a ``records`` value is a region.
    """
    out = bytearray(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    _encode_response_into(out, api_key, api_version, correlation_id, body, False)
    _INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response_chunks(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any], lean: bool = False
) -> list[Chunk]:
    """Encode a whole response frame as chunks to send in order; ``records`` may be regions.

    Without regions this is one chunk. With them, the size prefix counts each region's length, and
    the list alternates encoded bytes (views of one buffer, never copied) with the regions, in
    their wire order. ``lean``: a Produce v0-v8 body in the lean form of produce_codec.py. Raises like
    :func:`encode_response`.
    """
    out = _ChunkedOut(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    _encode_response_into(out, api_key, api_version, correlation_id, body, lean)
    regions = out.regions
    if not regions:
        _INT32.pack_into(out, 0, len(out) - 4)
        return [out]
    _INT32.pack_into(out, 0, len(out) - 4 + sum(len(region) for _, region in regions))
    view = memoryview(out)
    chunks: list[Chunk] = []
    start = 0
    for position, region in regions:
        if position > start:
            chunks.append(view[start:position])
        chunks.append(region)
        start = position
    if start < len(out):
        chunks.append(view[start:])
    return chunks


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
) -> bytes:
    """Encode a whole request frame (header v1, or v2 for flexible versions), size prefix included."""
    encoder, flexible = _ENCODERS.get((api_key, api_version, True)) or _encoder(
        api_key, api_version, True, correlation_id
    )
    try:
        out = encode_request_header(api_key, api_version, correlation_id, client_id, flexible)
        encoder(body, out)
    except _ENCODE_ERRORS as exc:
        raise ValueError(f"cannot encode request api_key={api_key} v{api_version}: {exc!r}") from exc
    _INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(
    api_key: int, api_version: int, payload: bytes | bytearray | memoryview
) -> tuple[int, dict[str, Any]]:
    """Decode a response frame (without size prefix) to ``(correlation_id, body)``.

    Raises:
        UnsupportedVersion: unknown API key or version.
        CorruptFrame: the frame does not parse.
    """
    buf = _as_view(payload)
    try:
        (correlation_id,) = _INT32.unpack_from(buf, 0)
        if api_key == API_VERSIONS_KEY and len(buf) >= 6 and _INT16.unpack_from(buf, 4)[0] != 0:
            api_version = 0  # a failed ApiVersions response has a v0 body
    except struct.error as exc:
        raise CorruptFrame("truncated response header") from exc
    decoder, flexible = _DECODERS.get((api_key, api_version, False)) or _decoder(
        api_key, api_version, False, correlation_id
    )
    try:
        body, pos = decoder(buf, skip_tagged_fields(buf, 4) if flexible else 4)
    except _CORRUPT as exc:
        raise CorruptFrame(f"api_key={api_key} v{api_version}: {exc}") from exc
    if pos != len(buf):
        raise CorruptFrame(f"api_key={api_key} v{api_version}: {len(buf) - pos} bytes left over")
    return correlation_id, body


def generated_source(api_key: int, api_version: int, is_request: bool, decode: bool) -> str:
    """The generated Python source of one codec function (for debugging and review)."""
    spec, _ = _spec_for(api_key, api_version, is_request, -1)
    fn = compile_decoder(spec, api_version) if decode else compile_encoder(spec, api_version)
    return fn.__doc__ or ""
