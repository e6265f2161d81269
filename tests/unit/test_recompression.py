"""Topic compression.type: batches of another codec are recompressed on append, records unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import crc_ok, iter_headers, read_header, seal_crc
from strom.protocol.records.builder import build_batch, decode_batches, recompress_batch
from strom.protocol.records.compression import CompressionType
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

RECORDS = [
    (b"k1", b"v1" * 50, (("h", b"x"),), 1_000),
    (None, b"v2" * 50, (), 990),  # timestamps need not increase
    (b"k3", None, (("a", b"1"), ("b", None)), 1_005),
]


def produced(codec: CompressionType, **kwargs: object) -> bytes:
    return build_batch(RECORDS, compression=codec, **kwargs)  # type: ignore[arg-type]


def open_log(path: Path, compression_type: str, **config: object) -> PartitionLog:
    cfg = LogConfig(compression_type=compression_type, **config)  # type: ignore[arg-type]
    return PartitionLog(str(path / "t-0"), cfg, lambda: 1_000_000)


def stored(log: PartitionLog) -> bytes:
    return log.read(0, 1 << 20)


def same_records(a: bytes, b: bytes) -> bool:
    def strip(data: bytes) -> list[tuple[object, ...]]:
        return [(r.key, r.value, r.headers, r.timestamp) for x in decode_batches(data) for r in x.records]

    return strip(a) == strip(b)


@pytest.mark.parametrize("source", list(CompressionType))
@pytest.mark.parametrize("target", list(CompressionType))
def test_recompress_batch_keeps_every_field_but_codec_length_and_crc(
    source: CompressionType, target: CompressionType
) -> None:
    original = produced(source, producer_id=7, producer_epoch=2, base_sequence=40, base_offset=0)
    header = read_header(original)
    out = recompress_batch(original, 0, header, target, max_uncompressed_size=1 << 20)
    new = read_header(out)
    assert new.compression == target and crc_ok(out, 0, new) and new.size == len(out)
    keep = ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp", "max_timestamp")
    keep += ("producer_id", "producer_epoch", "base_sequence", "records_count", "timestamp_type")
    assert all(getattr(new, f) == getattr(header, f) for f in keep)
    assert same_records(original, out)


@pytest.mark.parametrize(
    ("topic", "codec"), [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), ("uncompressed", 0)]
)
def test_append_stores_the_topics_codec(tmp_path: Path, topic: str, codec: int) -> None:
    log = open_log(tmp_path, topic)
    source = CompressionType.LZ4 if codec != 3 else CompressionType.GZIP
    log.append_as_leader(produced(CompressionType.NONE), 0)
    info = log.append_as_leader(produced(source, producer_id=3, producer_epoch=0, base_sequence=0), 5)
    assert (info.base_offset, info.last_offset) == (3, 5)
    data = stored(log)
    headers = [h for _, h in iter_headers(data)]
    assert [h.compression for h in headers] == [codec, codec]
    assert [(h.base_offset, h.partition_leader_epoch, h.producer_id) for h in headers] == [
        (0, 0, -1),
        (3, 5, 3),
    ]
    assert all(crc_ok(data, p, h) for p, h in iter_headers(data))
    assert same_records(data, produced(CompressionType.NONE) + produced(CompressionType.NONE))
    retry = log.append_as_leader(produced(source, producer_id=3, producer_epoch=0, base_sequence=0), 5)
    assert retry.duplicate and retry.base_offset == 3  # idempotence sees the same sequences


def test_a_batch_already_in_the_topics_codec_is_stored_as_sent(tmp_path: Path) -> None:
    log = open_log(tmp_path, "gzip")
    sent = produced(CompressionType.GZIP)
    log.append_as_leader(sent, 0)
    data = stored(log)
    assert data[8:12] == sent[8:12] and data[16:] == sent[16:]  # only offset and epoch were stamped


def test_producer_keeps_the_producers_codec(tmp_path: Path) -> None:
    log = open_log(tmp_path, "producer")
    log.append_as_leader(produced(CompressionType.LZ4), 0)
    assert read_header(stored(log)).compression == CompressionType.LZ4


def test_a_batch_too_large_once_uncompressed_is_refused(tmp_path: Path) -> None:
    big = build_batch([(b"k", b"\x00" * 200_000, (), 1)], compression=CompressionType.ZSTD)
    log = open_log(tmp_path, "uncompressed", max_message_bytes=100_000)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(big, 0)
    assert err.value.code is ErrorCode.MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0


def test_undecompressable_records_are_corrupt(tmp_path: Path) -> None:
    bad = bytearray(produced(CompressionType.GZIP))
    bad[70:80] = b"\xff" * 10
    seal_crc(bad)
    log = open_log(tmp_path, "lz4")
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(bytes(bad), 0)
    assert err.value.code is ErrorCode.CORRUPT_MESSAGE
