"""The message browser: the latest records of a partition this broker hosts, decoded for display.

This is the one place the broker decodes stored records, and only for a console page (never on the
produce/fetch paths): it reads whole batches below the high watermark through the log's own read path
(`PartitionLog.read_records` then the file bytes), decodes them (decompressing if need be, bounded),
skips control batches (transaction markers) and keeps the last ``n`` records.

Values: a value that starts with Confluent's wire format (magic byte 0, then a 4-byte schema id) whose
id the schema registry knows is decoded with that Avro schema (fastavro) and shown as JSON; other bytes
are shown as UTF-8 text when they are, else as ``0x``-prefixed hex (cut at ``MAX_SHOWN`` bytes).
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import fastavro

from strom.broker.broker import Broker
from strom.protocol.records.builder import decode_batches

MAX_RECORDS = 500
MAX_SHOWN = 2048
_READ_BYTES = 1024 * 1024
_MAX_UNCOMPRESSED = 64 * 1024 * 1024


@dataclass(frozen=True)
class BrowsedRecord:
    offset: int
    timestamp: int
    key: str
    value: str
    headers: str


def latest_records(broker: Broker, topic: str, index: int, n: int) -> list[BrowsedRecord] | None:
    """The last ``n`` records below the high watermark; None when this broker hosts no replica."""
    part = broker.replica_manager.partitions.get((topic, index))
    if part is None:
        return None
    log = part.log
    n = max(1, min(n, MAX_RECORDS))
    end = log.high_watermark
    start = max(log.log_start_offset, end - n)
    shown: list[BrowsedRecord] = []
    offset = start
    while offset < end:
        data = log.read_records(offset, _READ_BYTES, end, min_one_batch=True)
        if len(data) == 0:
            break
        batches = decode_batches(data.read_bytes(), verify_crc=False, max_uncompressed_size=_MAX_UNCOMPRESSED)
        if not batches:
            break
        for batch in batches:
            if batch.is_control:
                continue
            shown += [
                BrowsedRecord(
                    r.offset, r.timestamp, show(r.key, broker), show(r.value, broker), show_headers(r.headers)
                )
                for r in batch.records
                if start <= r.offset < end
            ]
        offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1
    return shown[-n:]


def show(data: bytes | None, broker: Broker) -> str:
    if data is None:
        return "null"
    avro = _avro(data, broker)
    if avro is not None:
        return avro
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data[:MAX_SHOWN].hex() + ("…" if len(data) > MAX_SHOWN else "")
    return text[:MAX_SHOWN] + ("…" if len(text) > MAX_SHOWN else "")


def show_headers(headers: tuple[tuple[str, bytes | None], ...]) -> str:
    return ", ".join(f"{k}={'null' if v is None else v.decode('utf-8', 'replace')}" for k, v in headers)


def _avro(data: bytes, broker: Broker) -> str | None:
    if len(data) < 5 or data[0] != 0:
        return None
    (schema_id,) = struct.unpack_from(">I", data, 1)
    stored = broker.registry.registry.state.schemas.get(schema_id)
    if stored is None or stored.schema_type.upper() != "AVRO" or stored.references:
        return None
    try:
        parsed = fastavro.parse_schema(json.loads(stored.schema))
        decoded: Any = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
    except Exception:  # not Avro after all (or not this schema): shown as bytes
        return None
    return f"(schema {schema_id}) " + json.dumps(decoded, default=str)
