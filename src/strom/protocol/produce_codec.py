"""Hand-written codec for the Produce request and response of the versions clients send (v3-v8).

The generic codec (codec.py) decodes every request into nested dicts and encodes responses from them.
A producer spread over many partitions sends requests with a thousand partition entries each, and a
dict per entry, built and read once, is a measurable part of the broker's cost per partition. These
two functions read and write the same bytes with plain tuples instead ("lean" bodies):

* request body: ``{"transactional_id", "acks", "timeout_ms", "topic_data"}`` where ``topic_data`` is a
  list of ``(name, [(index, records), ...])``, ``records`` a ``memoryview`` slice of the frame (or
  None), exactly what the generic decoder puts in its dicts;
* response body: ``{"responses", "throttle_time_ms"}`` where ``responses`` is a list of
  ``(name, [PartitionResult, ...])`` and a `PartitionResult` is the list ``[index, error_code,
  base_offset, log_append_time_ms, log_start_offset, error_message, record_errors]``
  (``record_errors`` a sequence of ``(batch_index, message)``); a list, because acks=all fills in
  its error afterwards. Fields a version lacks are not written, as the generic encoder does.

Layout (non-flexible versions, big-endian; docs/protocol.md#produce-request-layout-v3-v8): request =
transactional_id nullable string, acks int16, timeout_ms int32, [topic: name string, [partition: index int32,
records nullable bytes (int32 length)]]; response = [topic: name string, [partition: index int32, error_code
int16, base_offset int64, log_append_time_ms int64, log_start_offset int64 (v5+), record_errors
[batch_index int32, message nullable string] (v8+), error_message nullable string (v8+)]],
throttle_time_ms int32. v9+ (flexible) stay with the generic codec.

Same error contract as the generated decoder, which it must match byte for byte and error for error
(tests/unit/test_produce_codec.py compares both over generated and corrupted frames): it raises
``ValueError``/``struct.error``/``IndexError`` for what does not parse, which the caller turns into
``CorruptFrame``; a length past the end of the frame shows as bytes missing at the end, as there.

One form for the broker. The lean bodies are typed (`LeanProduceRequest`, `LeanProduceResponse`) and
are the only form the Produce handler sees: for the other versions the broker serves (v0-2, which the
generic codec decodes), :func:`lean_request` converts the generic body and :func:`generic_response`
turns the lean response back into the generic dicts (`LEAN_FORM_VERSIONS`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

LEAN_VERSIONS = range(3, 9)  # decoded and encoded here
LEAN_FORM_VERSIONS = range(9)  # the broker's bodies are lean (v0-2 converted from the generic codec)

PartitionResult = list[
    Any
]  # [index, error_code, base_offset, log_append_time_ms, log_start_offset, msg, errors]
# The fields of a PartitionResult, in order, as the generic codec names them (record_errors aside).
_RESULT_FIELDS = (
    "index",
    "error_code",
    "base_offset",
    "log_append_time_ms",
    "log_start_offset",
    "error_message",
)


class LeanProduceRequest(TypedDict):
    """A Produce request in the lean form: ``topic_data`` is ``[(name, [(index, records), ...])]``."""

    transactional_id: str | None  # None before v3 too
    acks: int
    timeout_ms: int
    topic_data: list[tuple[str, list[tuple[int, memoryview | None]]]]


class LeanProduceResponse(TypedDict):
    """A Produce response in the lean form: ``responses`` is ``[(name, [PartitionResult, ...])]``."""

    responses: list[tuple[str, list[PartitionResult]]]
    throttle_time_ms: int


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")
_INDEX_LENGTH = struct.Struct(">ii")
_PARTITION_V3 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_PARTITION_V8 = struct.Struct(">ihqqqi")  # ... and the record_errors count
_RECORD_ERROR = struct.Struct(">ih")  # batch_index and the message's length
_NULL_STRING = _I16.pack(-1)


def decode_produce_request(buf: memoryview, pos: int) -> tuple[LeanProduceRequest, int]:
    """The lean body of a Produce v3-v8 request whose body starts at ``pos``; and where it ends."""
    end = len(buf)
    (length,) = _I16.unpack_from(buf, pos)
    pos += 2
    transactional_id = None
    if length >= 0:
        transactional_id = str(buf[pos : pos + length], "utf-8")
        pos += length
    elif length != -1:
        raise ValueError("negative length")
    acks, timeout_ms, count = _ACKS_TIMEOUT_COUNT.unpack_from(buf, pos)
    pos += 10
    if count < 0:
        raise ValueError("null in non-nullable TopicData")
    if count > end - pos:
        raise ValueError("array longer than frame")
    topics: list[tuple[str, list[tuple[int, memoryview | None]]]] = []
    unpack_i16, unpack_i32, unpack_entry = _I16.unpack_from, _I32.unpack_from, _INDEX_LENGTH.unpack_from
    for _ in range(count):
        (length,) = unpack_i16(buf, pos)
        pos += 2
        if length < 0:
            raise ValueError("null in non-nullable Name")
        name = str(buf[pos : pos + length], "utf-8")
        pos += length
        (parts_count,) = unpack_i32(buf, pos)
        pos += 4
        if parts_count < 0:
            raise ValueError("null in non-nullable PartitionData")
        if parts_count > end - pos:
            raise ValueError("array longer than frame")
        parts: list[tuple[int, memoryview | None]] = []
        append = parts.append
        for _ in range(parts_count):
            index, length = unpack_entry(buf, pos)
            pos += 8
            if length >= 0:
                append((index, buf[pos : pos + length]))
                pos += length
            elif length == -1:
                append((index, None))
            else:
                raise ValueError("negative length")
        topics.append((name, parts))
    body: LeanProduceRequest = {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": topics,
    }
    return body, pos


def encode_produce_response(body: Mapping[str, Any], out: bytearray, version: int) -> None:
    """Append the lean Produce v3-v8 response ``body`` to ``out``."""
    responses: Sequence[tuple[str, Sequence[PartitionResult]]] = body["responses"]
    pack_i16, pack_i32 = _I16.pack, _I32.pack
    out += pack_i32(len(responses))
    for name, parts in responses:
        raw = name.encode()
        out += pack_i16(len(raw))
        out += raw
        out += pack_i32(len(parts))
        if version >= 8:
            for index, code, base_offset, append_time, start_offset, message, record_errors in parts:
                out += _PARTITION_V8.pack(
                    index, code, base_offset, append_time, start_offset, len(record_errors)
                )
                for batch_index, text in record_errors:
                    _nullable_string(out, text, _RECORD_ERROR.pack, batch_index)
                if message is None:  # the common case: no error message
                    out += _NULL_STRING
                else:
                    _nullable_string(out, message, _I16.pack)
        elif version >= 5:
            pack = _PARTITION_V5.pack
            for part in parts:
                out += pack(part[0], part[1], part[2], part[3], part[4])
        else:
            pack = _PARTITION_V3.pack
            for part in parts:
                out += pack(part[0], part[1], part[2], part[3])
    out += pack_i32(body.get("throttle_time_ms", 0))


def lean_request(body: Mapping[str, Any]) -> LeanProduceRequest:
    """A Produce request body of the generic codec in the lean form."""
    return {
        "transactional_id": body.get("transactional_id"),
        "acks": body["acks"],
        "timeout_ms": body["timeout_ms"],
        "topic_data": [
            (t["name"], [(p["index"], p["records"]) for p in t["partition_data"]]) for t in body["topic_data"]
        ],
    }


def generic_response(body: Mapping[str, Any]) -> dict[str, Any]:
    """A lean Produce response as the generic codec's body (the encoder leaves out what a version lacks)."""
    responses: Sequence[tuple[str, Sequence[PartitionResult]]] = body["responses"]
    return {
        "responses": [
            {
                "name": name,
                "partition_responses": [
                    {
                        **dict(zip(_RESULT_FIELDS, part, strict=False)),
                        "record_errors": [
                            {"batch_index": index, "batch_index_error_message": text}
                            for index, text in part[6]
                        ],
                    }
                    for part in parts
                ],
            }
            for name, parts in responses
        ],
        "throttle_time_ms": body.get("throttle_time_ms", 0),
    }


def _nullable_string(out: bytearray, text: str | None, pack: Any, *before: int) -> None:
    """``before`` fields, then ``text``'s int16 length (-1 for None) and bytes, packed with ``pack``."""
    if text is None:
        out += pack(*before, -1)
        return
    raw = text.encode()
    out += pack(*before, len(raw))
    out += raw
