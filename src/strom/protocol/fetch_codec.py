"""Hand-written codec for the flexible Fetch request and response (v12-v18), the consumers' hot path.

The generated codec (codec.py, codegen.py) reads and writes every tagged-field section field by
field: per partition of a flexible Fetch response it builds a list of tags, looks up each of the three
tagged fields, and writes the section's count and each compact length through a varint check. A
consumer's fetch carries a few partitions and a follower's many, so that per-partition work made the
flexible versions cost more than v11 for the same records (docs/benchmarks.md, "Fetch: v11 against
the flexible versions"). These
two functions read and write the same bytes for the case that is nearly always on the wire, and take
the same dicts (the broker's Fetch handler does not know which codec ran):

* :func:`decode_request` reads a request whose tagged-field sections are all empty and whose counts
  and lengths fit one varint byte (under 127 topics, partitions and bytes of a name), with one
  precompiled unpack over a topic's partitions (each one's fixed fields and the empty section after
  them). Anything else (a follower's ``replica_state``, a tagged field anywhere, longer lengths, a
  corrupt frame) returns None, and the caller decodes the frame with the generated decoder, which
  then decides as it does for every other API (the same dict, or the same error);
* :func:`encode_response` writes a response; per partition, one pack holds the fixed fields, the
  null aborted-transactions array, the preferred read replica and the records' compact length (up to
  16 KiB), when the partition has no aborted transactions and no tagged field (``diverging_epoch``,
  ``current_leader``, ``snapshot_id``); the others are written as the generated encoder writes them
  (a tagged struct only when a field differs from its default,
  docs/protocol.md#tagged-fields-at-their-defaults).

Layout (flexible Fetch, KIP-482): compact lengths are unsigned varints of length + 1 (0 for null);
every struct ends with a tagged-field section (a varint count, then tag, size, bytes per field).
Request = [replica_id int32 (v12-v14)], max_wait_ms int32, min_bytes int32, max_bytes int32,
isolation_level int8, session_id int32, session_epoch int32, topics [topic name (v12) or topic_id uuid
(v13+), partitions [partition int32, current_leader_epoch int32, fetch_offset int64, last_fetched_epoch
int32, log_start_offset int64, partition_max_bytes int32, tags (v17+: replica_directory_id, v18+:
high_watermark)]], forgotten_topics_data [name or id, partitions [int32]], rack_id string, tags
(cluster_id, v15+: replica_state). Response = throttle_time_ms int32, error_code int16, session_id
int32, responses [topic name (v12) or topic_id (v13+), partitions [partition_index int32, error_code
int16, high_watermark int64, last_stable_offset int64, log_start_offset int64, aborted_transactions
nullable [producer_id int64, first_offset int64], preferred_read_replica int32, records nullable,
tags (diverging_epoch, current_leader, snapshot_id)]], tags (v16+: node_endpoints).

The generated codec stays the reference: tests/unit/test_fetch_codec.py checks that both give equal
dicts and identical bytes for generated requests and responses at every flexible version. Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strom.protocol.primitives import UVARINT_SMALL, RecordsRegion, differs_from_defaults, uvarint

FLEXIBLE_VERSIONS = range(12, 19)  # read and written here
TOPIC_ID_VERSION = 13  # topics named by their 16-byte id (KIP-516)
REPLICA_STATE_VERSION = 15  # replica_id moves into the tagged replica_state
NODE_ENDPOINTS_VERSION = 16  # the response's tagged node_endpoints (KIP-951)
_DIRECTORY_ID_VERSION = 17  # a partition's tagged replica_directory_id
_HIGH_WATERMARK_VERSION = 18  # a partition's tagged high_watermark
_NO_HIGH_WATERMARK = 0x7FFFFFFFFFFFFFFF  # its default: "not supported"
_ZERO_UUID = bytes(16)

_HEAD_V12 = struct.Struct(">iiiibii")  # replica_id .. session_epoch
_HEAD_V15 = struct.Struct(">iiibii")  # without replica_id
# A partition of the request and the empty tagged-field section after it.
_FETCH_PARTITION = struct.Struct(">iiqiqiB")
_INT32 = struct.Struct(">i")
_UUID = struct.Struct("16s")  # pads or truncates as the generated encoder's '16s' does
_RESPONSE_HEAD = struct.Struct(">ihi")
# A partition of the response up to its records: no aborted transactions (compact null), the
# preferred read replica (and the records' compact length when it takes one or two bytes).
_PLAIN_PARTITION = struct.Struct(">ihqqqBi").pack
_PLAIN_PARTITION_1 = struct.Struct(">ihqqqBiB").pack  # ... and the records' one-byte compact length
_PLAIN_PARTITION_2 = struct.Struct(">ihqqqBiH").pack  # ... or its two bytes
_PARTITION_FIELDS = struct.Struct(">ihqqq").pack
_ABORTED = struct.Struct(">qqB").pack  # producer_id, first_offset, empty tags
# The tagged structs of a response partition: tag, key, fields with their defaults, and their layout.
_EPOCH_DEFAULTS = (("epoch", -1), ("end_offset", -1))
_LEADER_DEFAULTS = (("leader_id", -1), ("leader_epoch", -1))
_SNAPSHOT_DEFAULTS = (("end_offset", -1), ("epoch", -1))
_TAGGED_STRUCTS: tuple[tuple[int, str, tuple[tuple[str, int], ...], Callable[..., bytes]], ...] = (
    (0, "diverging_epoch", _EPOCH_DEFAULTS, struct.Struct(">iqB").pack),
    (1, "current_leader", _LEADER_DEFAULTS, struct.Struct(">iiB").pack),
    (2, "snapshot_id", _SNAPSHOT_DEFAULTS, struct.Struct(">qiB").pack),
)

Body = dict[str, Any]


def decode_request(buf: memoryview, pos: int, version: int) -> tuple[Body, int] | None:
    """The body of a flexible Fetch request starting at ``pos``, and where it ends; None when the
    frame is not in the common shape (module docstring), for the generated decoder to read."""
    try:
        if version >= REPLICA_STATE_VERSION:
            max_wait, min_bytes, max_bytes, isolation, session, epoch = _HEAD_V15.unpack_from(buf, pos)
            pos += 21
            replica = None
        else:
            replica, max_wait, min_bytes, max_bytes, isolation, session, epoch = _HEAD_V12.unpack_from(
                buf, pos
            )
            pos += 25
        topics, pos = _decode_topics(buf, pos, version)
        if buf[pos] == 1:  # no forgotten topics: Strom declines fetch sessions
            forgotten: list[Body] = []
            pos += 1
        else:
            forgotten, pos = _decode_forgotten(buf, pos, version >= TOPIC_ID_VERSION)
        length = buf[pos] - 1
        if length < 0 or length >= 0x7F or buf[pos + 1 + length]:  # a long rack id, or tagged fields
            return None
        rack_id = str(buf[pos + 1 : pos + 1 + length], "utf-8")
        pos += 2 + length
    except (_NotCommon, ValueError, IndexError, struct.error):
        return None
    body: Body = {
        "max_wait_ms": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation,
        "session_id": session,
        "session_epoch": epoch,
        "topics": topics,
        "forgotten_topics_data": forgotten,
        "rack_id": rack_id,
        "cluster_id": None,
    }
    if replica is None:
        body["replica_state"] = None
    else:
        body["replica_id"] = replica
    return body, pos


class _NotCommon(Exception):
    """A request outside the common shape: the generated decoder reads it."""


def _small_count(buf: memoryview, pos: int) -> int:
    """A compact count or length of one byte (0 to 126) at ``pos``."""
    count = buf[pos] - 1
    if count < 0 or count >= 0x7F:  # null, or more than one byte
        raise _NotCommon
    return count


def _decode_topics(buf: memoryview, pos: int, version: int) -> tuple[list[Body], int]:
    by_id = version >= TOPIC_ID_VERSION
    iter_partitions, size_of_partition = _FETCH_PARTITION.iter_unpack, _FETCH_PARTITION.size
    topics: list[Body] = []
    count = _small_count(buf, pos)
    pos += 1
    for _ in range(count):
        topic: Body
        if by_id:
            topic = {"topic_id": bytes(buf[pos : pos + 16])}
            pos += 16
        else:
            length = _small_count(buf, pos)
            topic = {"topic": str(buf[pos + 1 : pos + 1 + length], "utf-8")}
            pos += 1 + length
        size = size_of_partition * _small_count(buf, pos)
        pos += 1
        block = buf[pos : pos + size]
        # every partition's tagged-field section (its last byte) empty
        if len(block) != size or any(block[size_of_partition - 1 :: size_of_partition]):
            raise _NotCommon
        parts: list[Body] = [
            {
                "partition": index,
                "current_leader_epoch": leader_epoch,
                "fetch_offset": offset,
                "last_fetched_epoch": last_epoch,
                "log_start_offset": log_start,
                "partition_max_bytes": limit,
            }
            for index, leader_epoch, offset, last_epoch, log_start, limit, _ in iter_partitions(block)
        ]
        if version >= _DIRECTORY_ID_VERSION:  # the defaults of the partitions' tagged fields
            tags: Body = {"replica_directory_id": _ZERO_UUID}
            if version >= _HIGH_WATERMARK_VERSION:
                tags["high_watermark"] = _NO_HIGH_WATERMARK
            for part in parts:
                part.update(tags)
        pos += size
        if buf[pos]:
            raise _NotCommon
        pos += 1
        topic["partitions"] = parts
        topics.append(topic)
    return topics, pos


def _decode_forgotten(buf: memoryview, pos: int, by_id: bool) -> tuple[list[Body], int]:
    """Forgotten topics (only in a fetch session, which Strom declines)."""
    forgotten: list[Body] = []
    count = _small_count(buf, pos)
    pos += 1
    for _ in range(count):
        entry: Body
        if by_id:
            entry = {"topic_id": bytes(buf[pos : pos + 16])}
            pos += 16
        else:
            length = _small_count(buf, pos)
            entry = {"topic": str(buf[pos + 1 : pos + 1 + length], "utf-8")}
            pos += 1 + length
        parts_count = _small_count(buf, pos)
        entry["partitions"] = list(struct.unpack_from(f">{parts_count}i", buf, pos + 1))
        pos += 1 + 4 * parts_count
        if buf[pos]:
            raise _NotCommon
        pos += 1
        forgotten.append(entry)
    return forgotten, pos


def encode_response(body: Mapping[str, Any], out: bytearray, version: int) -> None:
    """Append the flexible Fetch response ``body`` (v12-v18) to ``out``, as the generated encoder
    does; ``records`` may be a `RecordsRegion` when ``out`` notes regions (codec._ChunkedOut)."""
    responses: Sequence[Mapping[str, Any]] = body.get("responses", ())
    out += _RESPONSE_HEAD.pack(
        body.get("throttle_time_ms", 0), body.get("error_code", 0), body.get("session_id", 0)
    )
    _length(out, len(responses))
    by_id = version >= TOPIC_ID_VERSION
    for topic in responses:
        if by_id:
            out += _UUID.pack(topic.get("topic_id", _ZERO_UUID))
        else:
            _compact_string(out, topic.get("topic", ""))
        parts: Sequence[Mapping[str, Any]] = topic.get("partitions", ())
        _length(out, len(parts))
        for p in parts:
            aborted = p.get("aborted_transactions", ())
            if aborted is not None or "current_leader" in p or "diverging_epoch" in p or "snapshot_id" in p:
                _partition(out, p, aborted)
                continue
            # (inline: this runs once per partition of every response)
            index, code, high_watermark = (
                p.get("partition_index", 0),
                p.get("error_code", 0),
                p.get("high_watermark", 0),
            )
            stable, start, replica = (
                p.get("last_stable_offset", -1),
                p.get("log_start_offset", -1),
                p.get("preferred_read_replica", -1),
            )
            records = p.get("records")
            length = 0 if records is None else len(records) + 1  # the compact length
            if length < 0x80:
                out += _PLAIN_PARTITION_1(index, code, high_watermark, stable, start, 0, replica, length)
            elif length < 0x4000:  # the two varint bytes as one big-endian uint16
                varint = (length & 0x7F | 0x80) << 8 | length >> 7
                out += _PLAIN_PARTITION_2(index, code, high_watermark, stable, start, 0, replica, varint)
            else:
                out += _PLAIN_PARTITION(index, code, high_watermark, stable, start, 0, replica)
                out += uvarint(length)
            if records is not None:
                _records_bytes(out, records)
            out.append(0)
        out.append(0)
    endpoints = body.get("node_endpoints") if version >= NODE_ENDPOINTS_VERSION else None
    if endpoints:
        tag = bytearray()
        _node_endpoints(tag, endpoints)
        out += b"\x01\x00"  # one tagged field: tag 0
        out += uvarint(len(tag))
        out += tag
    else:
        out.append(0)


# Records this large go out as a chunk of their own (one sendmsg entry) rather than being copied into
# the response's bytes: a copy of a remote read's megabytes costs more than the extra iovec entry.
RECORDS_APART = 64 * 1024


def _length(out: bytearray, count: int) -> None:
    """A compact array's or string's length (count + 1)."""
    out += UVARINT_SMALL[count + 1] if count < 0x7F else uvarint(count + 1)


def _compact_string(out: bytearray, text: str) -> None:
    raw = text.encode()
    _length(out, len(raw))
    out += raw


def _nullable_compact_string(out: bytearray, text: str | None) -> None:
    if text is None:
        out.append(0)
    else:
        _compact_string(out, text)


def _records(out: bytearray, records: bytes | memoryview | RecordsRegion | None) -> None:
    if records is None:
        out.append(0)
        return
    _length(out, len(records))
    _records_bytes(out, records)


def _records_bytes(out: bytearray, records: bytes | memoryview | RecordsRegion) -> None:
    """The records after their length: a region, or records of ``RECORDS_APART`` bytes or more (a
    remote read's), are noted in ``out.regions`` and sent as they are (codec.encode_response_chunks),
    not copied into the frame; others are copied."""
    regions = getattr(out, "regions", None)  # codec._ChunkedOut's
    if isinstance(records, RecordsRegion) or (regions is not None and len(records) >= RECORDS_APART):
        regions.append((len(out), records))  # type: ignore[union-attr]  # a region: always chunked
    else:
        out += records


def _partition(out: bytearray, p: Mapping[str, Any], aborted: Sequence[Mapping[str, Any]] | None) -> None:
    """A partition with aborted transactions or tagged fields, field by field."""
    out += _PARTITION_FIELDS(
        p.get("partition_index", 0),
        p.get("error_code", 0),
        p.get("high_watermark", 0),
        p.get("last_stable_offset", -1),
        p.get("log_start_offset", -1),
    )
    if aborted is None:
        out.append(0)
    else:
        _length(out, len(aborted))
        for txn in aborted:
            out += _ABORTED(txn.get("producer_id", 0), txn.get("first_offset", 0), 0)
    out += _INT32.pack(p.get("preferred_read_replica", -1))
    _records(out, p.get("records"))
    tags: list[tuple[int, bytes]] = []
    for tag, key, defaults, pack in _TAGGED_STRUCTS:
        value = p.get(key)
        if value is not None and differs_from_defaults(value, defaults):
            tags.append((tag, pack(*(value.get(name, default) for name, default in defaults), 0)))
    out += uvarint(len(tags))
    for tag, data in tags:
        out += uvarint(tag)
        out += uvarint(len(data))
        out += data


def _node_endpoints(out: bytearray, endpoints: Sequence[Mapping[str, Any]]) -> None:
    _length(out, len(endpoints))
    for node in endpoints:
        out += _INT32.pack(node.get("node_id", 0))
        _compact_string(out, node.get("host", ""))
        out += _INT32.pack(node.get("port", 0))
        _nullable_compact_string(out, node.get("rack"))
        out.append(0)
