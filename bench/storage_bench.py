"""Storage micro-benchmark: PartitionLog append and read throughput (medians over trials).

Each produce request is ~1 MB made of ~16 KB uncompressed v2 batches of 100-byte records (the Java
client's default batch.size), the shape the broker sees from a busy producer. Appends go through
``append_as_leader`` (header + CRC validation, offset patching, one write); reads go through
``PartitionLog.read`` with 1 MB max_bytes from offset 0 to the end, like a catching-up consumer.
Data lands in the page cache (the default flush policy), as in Kafka.

    .venv/bin/python bench/storage_bench.py [--mb 256] [--trials 5] [--batch-kb 16] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import tempfile
import time

import crc32c

from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

_HEADER = struct.Struct(">qiibIhiqqqhii")


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def make_batch(records: int, value_size: int, timestamp: int) -> bytes:
    body = bytearray()
    for i in range(records):
        rec = (
            b"\x00"
            + _varint(0)
            + _varint(i)
            + _varint(-1)
            + _varint(value_size)
            + b"v" * value_size
            + _varint(0)
        )
        body += _varint(len(rec)) + rec
    batch = bytearray(
        _HEADER.pack(0, 49 + len(body), -1, 2, 0, 0, records - 1, timestamp, timestamp, -1, -1, -1, records)
    )
    batch += body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def make_request(request_bytes: int, batch_bytes: int, value_size: int) -> bytes:
    per_record = value_size + 8
    one = make_batch(max(1, (batch_bytes - 61) // per_record), value_size, int(time.time() * 1000))
    return one * max(1, request_bytes // len(one))


def bench_append(directory: str, request: bytes, total_bytes: int) -> tuple[float, PartitionLog]:
    log = PartitionLog(directory, LogConfig(segment_bytes=128 * 1024 * 1024))
    n = max(1, total_bytes // len(request))
    start = time.perf_counter()
    for _ in range(n):
        log.append_as_leader(request, leader_epoch=0)
        log.high_watermark = log.log_end_offset
    elapsed = time.perf_counter() - start
    return n * len(request) / elapsed / 1e6, log


def bench_read(log: PartitionLog, max_bytes: int) -> float:
    offset, total = log.log_start_offset, 0
    end = log.high_watermark
    start = time.perf_counter()
    while offset < end:
        data = log.read(offset, max_bytes, max_offset_exclusive=end)
        total += len(data)
        (base,) = struct.unpack_from(">q", data, len(data) - _last_batch_size(data))
        (delta,) = struct.unpack_from(">i", data, len(data) - _last_batch_size(data) + 23)
        offset = base + delta + 1
    return total / (time.perf_counter() - start) / 1e6


def _last_batch_size(data: bytes) -> int:
    pos, size = 0, 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        pos += size
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="MB appended per trial")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--batch-kb", type=int, default=16)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--dir", default=None, help="parent directory for the log (default: system temp)")
    args = parser.parse_args()
    request = make_request(1 << 20, args.batch_kb * 1024, args.value_size)
    appends, reads = [], []
    for _ in range(args.trials):
        root = tempfile.mkdtemp(dir=args.dir)
        try:
            mb_s, log = bench_append(f"{root}/bench-0", request, args.mb << 20)
            appends.append(mb_s)
            reads.append(bench_read(log, 1 << 20))
            log.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"request {len(request)} bytes, batches of {args.batch_kb} KB, {args.value_size}-byte values")
    _report("append", appends)
    _report("read", reads)


def _report(name: str, samples: list[float]) -> None:
    trials = ", ".join(f"{x:.0f}" for x in samples)
    print(f"{name:6} MB/s median {statistics.median(samples):.0f}  (trials: {trials})")


if __name__ == "__main__":
    main()
