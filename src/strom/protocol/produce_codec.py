"""Hand-written codec for the Produce request and response of the versions clients send (v3-v13).

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
throttle_time_ms int32. v9-v13 (flexible) have the same fields with compact lengths (unsigned varints
of length + 1, 0 for null) and a tagged-field section ending each struct; v13 names each topic by its
16-byte id instead of its name (the lean bodies then carry ``topic_ids``, names empty), and from v10
a partition's section may hold its current leader and the body's the leaders' addresses (KIP-951).

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
from typing import Any, NotRequired, TypedDict

from strom.protocol.primitives import read_uvarint, uvarint

LEAN_VERSIONS = range(3, 9)  # decoded and encoded here (non-flexible)
FLEXIBLE_LEAN_VERSIONS = range(9, 14)  # decoded and encoded here too (flexible)
# The broker's bodies are lean (v0-2 converted from the generic codec).
LEAN_FORM_VERSIONS = range(14)
NEW_LEADER_VERSION = 10  # current_leader and node_endpoints in the response (KIP-951)
TOPIC_ID_VERSION = 13  # topics named by id (KIP-516)

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
    """A Produce request in the lean form: ``topic_data`` is ``[(name, [(index, records), ...])]``.

    From v13 topics are named by id: the names are empty and ``topic_ids`` lists each topic's id, in
    the order of ``topic_data``.
    """

    transactional_id: str | None  # None before v3 too
    acks: int
    timeout_ms: int
    topic_data: list[tuple[str, list[tuple[int, memoryview | None]]]]
    topic_ids: NotRequired[list[bytes]]


class LeanProduceResponse(TypedDict):
    """A Produce response in the lean form: ``responses`` is ``[(name, [PartitionResult, ...])]``.

    v10+ (KIP-951): a `PartitionResult` may have an eighth item, the partition's current leader
    (``{"leader_id", "leader_epoch"}``), and ``node_endpoints`` the addresses of those leaders; v13:
    ``topic_ids`` names the topics by id, in the order of ``responses``.
    """

    responses: list[tuple[str, list[PartitionResult]]]
    throttle_time_ms: int
    topic_ids: NotRequired[list[bytes]]
    node_endpoints: NotRequired[list[dict[str, Any]]]


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")
_INDEX_LENGTH = struct.Struct(">ii")
_PARTITION_V3 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_PARTITION_V8 = struct.Struct(">ihqqqi")  # ... and the record_errors count
_RECORD_ERROR = struct.Struct(">ih")  # batch_index and the message's length
_NULL_STRING = _I16.pack(-1)
_ACKS_TIMEOUT_BYTE = struct.Struct(">hiB")  # acks, timeout_ms and the topic count's first byte
# A partition's index and the first two bytes of its records' compact length.
_INDEX_COMPACT_LENGTH = struct.Struct(">iBB")
# A partition result, no record errors (compact array length 1), no message (0), no tags (0).
_PARTITION_FLEXIBLE_PLAIN = struct.Struct(">ihqqqBBB").pack
# A tagged-field section holding only tag 0 of 9 bytes: current_leader (leader_id, leader_epoch, no tags).
_LEADER_TAG = struct.Struct(">BBBiiB")


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


def _compact_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """A compact length (unsigned varint of length + 1) at ``pos``: (length, -1 for null; next pos)."""
    n = buf[pos]
    if n < 0x80:
        return n - 1, pos + 1
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def _skip_tags(buf: memoryview, pos: int, end: int) -> int:
    """Past a tagged-field section (Produce requests define no tags: all are skipped)."""
    count = buf[pos]
    if count == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise ValueError("tagged field longer than frame")
    return pos


def decode_flexible_request(buf: memoryview, pos: int, by_id: bool) -> tuple[LeanProduceRequest, int]:
    """The lean body of a flexible Produce request (v9-v12; ``by_id``: v13, topics named by id)."""
    # The one-byte forms of compact lengths and empty tagged-field sections are read inline (a call
    # each would cost more than the rest of a small request's body): the helpers take the rest.
    end = len(buf)
    length = buf[pos] - 1
    if length < 0x7F:
        pos += 1
    else:
        length, pos = _compact_length(buf, pos)
    transactional_id = None
    if length >= 0:
        transactional_id = str(buf[pos : pos + length], "utf-8")
        pos += length
    elif length != -1:
        raise ValueError("negative length")
    acks, timeout_ms, count = _ACKS_TIMEOUT_BYTE.unpack_from(buf, pos)
    if count < 0x80:
        count -= 1
        pos += 7
    else:
        count, pos = _compact_length(buf, pos + 6)
    if count < 0:
        raise ValueError("null in non-nullable TopicData")
    if count > end - pos:
        raise ValueError("array longer than frame")
    topics: list[tuple[str, list[tuple[int, memoryview | None]]]] = []
    topic_ids: list[bytes] = []
    unpack_index_length = _INDEX_COMPACT_LENGTH.unpack_from
    for _ in range(count):
        if by_id:
            if pos + 16 > end:
                raise ValueError("uuid past the end of the frame")
            topic_ids.append(bytes(buf[pos : pos + 16]))
            pos += 16
            name = ""
        else:
            length = buf[pos] - 1
            if length < 0x7F:
                pos += 1
            else:
                length, pos = _compact_length(buf, pos)
            if length < 0:
                raise ValueError("null in non-nullable Name")
            name = str(buf[pos : pos + length], "utf-8")
            pos += length
        parts_count = buf[pos] - 1
        if parts_count < 0x7F:
            pos += 1
        else:
            parts_count, pos = _compact_length(buf, pos)
        if parts_count < 0:
            raise ValueError("null in non-nullable PartitionData")
        if parts_count > end - pos:
            raise ValueError("array longer than frame")
        parts: list[tuple[int, memoryview | None]] = []
        append = parts.append
        for _ in range(parts_count):  # (the common cases inline: this runs once per partition)
            # The records' length is a varint of 1 byte (under 127 bytes), 2 (up to 16 KiB) or more; the
            # second byte is read with the first (a valid frame always has one: at least the tags).
            # ``size``: the records' byte count (the compact length less one; -1 for null).
            index, first, second = unpack_index_length(buf, pos)
            if first < 0x80:
                size = first - 1
                pos += 5
            elif second < 0x80:
                size = first + (second << 7) - 0x81  # (first & 0x7F) | second << 7, less one
                pos += 6
            else:
                size, pos = read_uvarint(buf, pos + 4)
                size -= 1
            if size >= 0:
                after = pos + size
                append((index, buf[pos:after]))
                pos = after
            else:
                append((index, None))
            if buf[pos]:
                pos = _skip_tags(buf, pos, end)
            else:
                pos += 1
        pos = pos + 1 if buf[pos] == 0 else _skip_tags(buf, pos, end)
        topics.append((name, parts))
    pos = pos + 1 if buf[pos] == 0 else _skip_tags(buf, pos, end)
    body: LeanProduceRequest = {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": topics,
    }
    if by_id and topics:
        body["topic_ids"] = topic_ids
    return body, pos


def _compact_string(out: bytearray, text: str | None) -> None:
    if text is None:
        out.append(0)
        return
    raw = text.encode()
    out += uvarint(len(raw) + 1)
    out += raw


def encode_flexible_response(body: Mapping[str, Any], out: bytearray, version: int) -> None:
    """Append the lean flexible Produce response ``body`` (v9-v13) to ``out``."""
    responses: Sequence[tuple[str, Sequence[PartitionResult]]] = body["responses"]
    topic_ids: Sequence[bytes] | None = body.get("topic_ids") if version >= TOPIC_ID_VERSION else None
    hints = version >= NEW_LEADER_VERSION
    by_id = version >= TOPIC_ID_VERSION
    # Compact lengths below 128 are one byte, appended inline (the common case; uvarint otherwise).
    count = len(responses) + 1
    if count < 0x80:
        out.append(count)
    else:
        out += uvarint(count)
    for number, (name, parts) in enumerate(responses):
        if by_id:
            out += topic_ids[number] if topic_ids else bytes(16)
        else:
            raw = name.encode()
            count = len(raw) + 1
            if count < 0x80:
                out.append(count)
            else:
                out += uvarint(count)
            out += raw
        count = len(parts) + 1
        if count < 0x80:
            out.append(count)
        else:
            out += uvarint(count)
        for part in parts:
            record_errors = part[6]
            if not record_errors and part[5] is None and (not hints or len(part) == 7):
                # the common case in one pack: no record errors, no message, no tags
                out += _PARTITION_FLEXIBLE_PLAIN(part[0], part[1], part[2], part[3], part[4], 1, 0, 0)
                continue
            out += _PARTITION_V5.pack(part[0], part[1], part[2], part[3], part[4])
            out += uvarint(len(record_errors) + 1)
            for batch_index, text in record_errors:
                out += _I32.pack(batch_index)
                _compact_string(out, text)
                out.append(0)
            _compact_string(out, part[5])
            leader = part[7] if hints and len(part) > 7 else None
            if leader is not None and (leader["leader_id"], leader["leader_epoch"]) != (-1, -1):
                out += _LEADER_TAG.pack(1, 0, 9, leader["leader_id"], leader["leader_epoch"], 0)
            else:
                out.append(0)
        out.append(0)
    out += _I32.pack(body.get("throttle_time_ms", 0))
    endpoints = body.get("node_endpoints") if hints else None
    if not endpoints:
        out.append(0)
        return
    tag = bytearray(uvarint(len(endpoints) + 1))
    for e in endpoints:
        tag += _I32.pack(e["node_id"])
        _compact_string(tag, e["host"])
        tag += _I32.pack(e["port"])
        _compact_string(tag, e["rack"])
        tag.append(0)
    out += b"\x01\x00"
    out += uvarint(len(tag))
    out += tag


def lean_request(body: Mapping[str, Any]) -> LeanProduceRequest:
    """A Produce request body of the generic codec in the lean form."""
    topics = body["topic_data"]
    lean: LeanProduceRequest = {
        "transactional_id": body.get("transactional_id"),
        "acks": body["acks"],
        "timeout_ms": body["timeout_ms"],
        "topic_data": [
            (t.get("name", ""), [(p["index"], p["records"]) for p in t["partition_data"]]) for t in topics
        ],
    }
    if topics and "topic_id" in topics[0]:
        lean["topic_ids"] = [t["topic_id"] for t in topics]
    return lean


def generic_response(body: Mapping[str, Any]) -> dict[str, Any]:
    """A lean Produce response as the generic codec's body (the encoder leaves out what a version lacks)."""
    responses: Sequence[tuple[str, Sequence[PartitionResult]]] = body["responses"]
    topic_ids: Sequence[bytes] = body.get("topic_ids") or [bytes(16)] * len(responses)
    generic: dict[str, Any] = {
        "responses": [
            {
                "name": name,
                "topic_id": topic_id,
                "partition_responses": [_generic_partition(part) for part in parts],
            }
            for (name, parts), topic_id in zip(responses, topic_ids, strict=True)
        ],
        "throttle_time_ms": body.get("throttle_time_ms", 0),
    }
    if body.get("node_endpoints"):
        generic["node_endpoints"] = body["node_endpoints"]
    return generic


def _generic_partition(part: PartitionResult) -> dict[str, Any]:
    out = {
        **dict(zip(_RESULT_FIELDS, part, strict=False)),
        "record_errors": [
            {"batch_index": index, "batch_index_error_message": text} for index, text in part[6]
        ],
    }
    if len(part) > 7:
        out["current_leader"] = part[7]
    return out


def _nullable_string(out: bytearray, text: str | None, pack: Any, *before: int) -> None:
    """``before`` fields, then ``text``'s int16 length (-1 for None) and bytes, packed with ``pack``."""
    if text is None:
        out += pack(*before, -1)
        return
    raw = text.encode()
    out += pack(*before, len(raw))
    out += raw
