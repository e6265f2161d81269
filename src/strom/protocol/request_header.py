"""The request header, read and written in this one place.

Layout (Kafka's ``RequestHeader``, docs/protocol.md#wire-basics): header v1 is ``api_key int16,
api_version int16, correlation_id int32, client_id nullable int16-string``; header v2, which an API's
flexible versions use, adds a tagged-field section after ``client_id`` (which stays a plain
int16-string, never compact). Which of the two a request carries is the message spec's say, known to the
codec (`strom.protocol.codec`) once it has the API key and version. So:

* `peek_request_header`: the fixed 8-byte prefix ``(api_key, api_version, correlation_id)``, all that
  routing needs before anything is decoded: the network layer (is the version served? a Produce?) and
  the SASL gate (which request came before authentication);
* `read_request_header`: header v1 whole, with the position after ``client_id``; a v2 header's tagged
  section follows there, and `skip_tagged_fields` steps over it (unknown tags are skipped, as Kafka
  skips them; response header v1 ends with the same section);
* `encode_request_header`: the same layout, written.

Error contract: `peek_request_header` and `read_request_header` raise `CorruptFrame` and nothing else
for whatever does not parse (fewer bytes than the fixed part, a ``client_id`` length below -1 or past
the end of the frame, a ``client_id`` that is not UTF-8); `skip_tagged_fields` raises ``ValueError`` or
``IndexError`` for a section running past the end, which the codec's decoders turn into `CorruptFrame`
with the body's own errors. Pure functions, no state; one call per request on the broker's hot path
(a struct unpack and the client id's decode).
"""

from __future__ import annotations

import struct

from strom.protocol import primitives
from strom.protocol.errors import CorruptFrame

__all__ = [
    "PREFIX_SIZE",
    "RequestPrefix",
    "encode_request_header",
    "peek_request_header",
    "read_request_header",
    "skip_tagged_fields",
]

PREFIX_SIZE = 8  # api_key, api_version, correlation_id
_PREFIX = struct.Struct(">hhi")
_FIXED = struct.Struct(">hhih")  # the prefix and the client_id length
_CLIENT_ID_SIZE = struct.Struct(">h")
_SIZE_AND_PREFIX = struct.Struct(">ihhi")

RequestPrefix = tuple[int, int, int]  # api_key, api_version, correlation_id
RequestHeader = tuple[int, int, int, str | None, int]  # the prefix, client_id, where it ends


def peek_request_header(payload: bytes | bytearray | memoryview) -> RequestPrefix:
    """``(api_key, api_version, correlation_id)`` of a request frame (without its size prefix).

    Raises:
        CorruptFrame: the frame is shorter than the prefix.
    """
    try:
        prefix: RequestPrefix = _PREFIX.unpack_from(payload)
    except struct.error:
        raise CorruptFrame(f"truncated request header ({len(payload)} bytes)") from None
    return prefix


def read_request_header(buf: memoryview) -> RequestHeader:
    """``(api_key, api_version, correlation_id, client_id, end)`` of header v1; ``end`` is where the
    body starts, or (header v2) the tagged section.

    Raises:
        CorruptFrame: the header does not parse.
    """
    try:
        api_key, api_version, correlation_id, length = _FIXED.unpack_from(buf)
        if length < 0:
            if length != -1:
                raise ValueError(f"client_id length {length}")
            return api_key, api_version, correlation_id, None, 10
        end = 10 + length
        if end > len(buf):
            raise ValueError("client_id longer than the frame")
        return api_key, api_version, correlation_id, str(buf[10:end], "utf-8"), end
    except (struct.error, ValueError) as exc:
        raise CorruptFrame(f"request header: {exc}") from None


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """The position after the tagged-field section at ``pos`` (the fields are not read).

    Raises:
        ValueError: the section runs past the end of ``buf`` (IndexError if a varint does).
    """
    count, pos = primitives.read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = primitives.read_uvarint(buf, pos)
        size, pos = primitives.read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged field longer than frame")
    return pos


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytearray:
    """A request frame's start: a 4-byte size placeholder, then header v1 (v2 if ``flexible``, with an
    empty tagged section). The caller appends the body and patches the size."""
    out = bytearray(_SIZE_AND_PREFIX.pack(0, api_key, api_version, correlation_id))
    raw = None if client_id is None else client_id.encode()
    out += _CLIENT_ID_SIZE.pack(-1 if raw is None else len(raw))
    out += raw or b""
    if flexible:
        out.append(0)
    return out
