"""PartitionLog: offsets, rolling, reads, timestamps, truncation, retention, idempotence, restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_storage_support import idempotent_batch, make_batch

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import crc_ok, iter_headers, read_header
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.time_lookup import max_timestamp_offset


class Clock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_log(path: Path, clock: Clock | None = None, **config: object) -> PartitionLog:
    return PartitionLog(str(path / "t-0"), LogConfig(**config), clock or Clock())  # type: ignore[arg-type]


def offsets_in(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_headers(data)]


def fill(log: PartitionLog, batches: int, count: int = 3, **kwargs: object) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(count=count, **kwargs), leader_epoch=0)  # type: ignore[arg-type]


def test_offsets_assigned_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    infos = [log.append_as_leader(make_batch(count=4), 0) for _ in range(30)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(4 * n, 4 * n + 3) for n in range(30)]
    assert log.log_end_offset == 120
    assert len(log.segments) > 3
    assert all(s.size <= 1000 for s in log.segments)
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    for prev, nxt in zip(log.segments, log.segments[1:], strict=False):
        assert prev.next_offset == nxt.base_offset
    stored = b"".join(s.read_bytes(0, s.size) for s in log.segments)
    assert offsets_in(stored) == [(4 * n, 4 * n + 3) for n in range(30)]
    assert all(crc_ok(stored, p, h) and h.partition_leader_epoch == 0 for p, h in iter_headers(stored))


def test_several_batches_in_one_request(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    info = log.append_as_leader(make_batch(count=2) + make_batch(count=5) + make_batch(count=1), 3)
    assert (info.base_offset, info.last_offset, info.duplicate) == (0, 7, False)
    assert offsets_in(log.read(0, 10_000)) == [(0, 1), (2, 6), (7, 7)]


def test_roll_by_time(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append_as_leader(make_batch(timestamp=10_000), 0)
    log.append_as_leader(make_batch(timestamp=10_900), 0)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(timestamp=11_001), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_index_full(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_index_bytes=24, index_interval_bytes=1)
    fill(log, 10)
    assert len(log.segments) > 1
    assert all(s.offset_index.entries <= 3 for s in log.segments)


def test_record_list_too_large_and_message_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, max_message_bytes=150)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(count=10, value_size=20), 0)
    assert err.value.code is ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch() * 3, 0)
    assert err.value.code is ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0


def test_read_semantics(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600, index_interval_bytes=50)
    fill(log, 20)  # offsets 0..59, batches of 3
    batch_size = len(make_batch(count=3))
    assert offsets_in(log.read(4, batch_size))[0] == (3, 5)  # the batch containing the offset
    assert offsets_in(log.read(0, 1)) == [(0, 2)]  # at least one whole batch
    assert log.read(0, 1, min_one_batch=False) == b""
    assert offsets_in(log.read(0, 2 * batch_size + 10)) == [(0, 2), (3, 5)]  # whole batches only
    everything = log.read(0, 1 << 20)
    assert offsets_in(everything) == [(n, n + 2) for n in range(0, 60, 3)]  # across segments
    assert offsets_in(log.read(0, 1 << 20, max_offset_exclusive=9)) == [(0, 2), (3, 5), (6, 8)]
    assert log.read(9, 1 << 20, max_offset_exclusive=9) == b""
    assert log.read(10, 1 << 20, max_offset_exclusive=11) == b""  # the batch 9..11 is not complete below 11
    assert log.read(60, 100) == b""
    for bad in (-1, 61):
        with pytest.raises(KafkaError) as err:
            log.read(bad, 100)
        assert err.value.code is ErrorCode.OFFSET_OUT_OF_RANGE


def test_read_at_segment_boundaries(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    fill(log, 12)
    for segment in log.segments:
        data = log.read(segment.base_offset, 1)
        assert offsets_in(data)[0][0] == segment.base_offset
        last = segment.next_offset - 1
        assert offsets_in(log.read(last, 1))[0][1] == last


def test_find_batch_through_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    fill(log, 50, count=2)
    segment = log.active_segment
    assert segment.offset_index.entries > 10
    for offset in range(100):
        position, header = segment.find_batch(offset) or (None, None)
        assert header is not None and header.base_offset <= offset <= header.last_offset
        assert read_header(segment.read_bytes(position, 61)).base_offset == header.base_offset
    assert segment.find_batch(100) is None


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    for i in range(30):
        log.append_as_leader(make_batch(count=2, timestamps=[1000 + 10 * i, 1005 + 10 * i]), 0)
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1010) == (2, 1010)
    assert log.offset_for_timestamp(1013) == (3, 1015)  # the record inside the batch
    assert log.offset_for_timestamp(1006) == (2, 1010)
    assert log.offset_for_timestamp(1295) == (59, 1295)
    assert log.offset_for_timestamp(1296) is None


def test_offset_for_max_timestamp(tmp_path: Path) -> None:
    """KIP-734: the first record carrying the largest timestamp, inside its batch, across segments."""
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=50)
    assert max_timestamp_offset(log.segments, log.log_start_offset) is None
    for i in range(30):
        stamps = [5000, 4000] if i == 7 else [1000 + i, 1000 + i]
        log.append_as_leader(make_batch(count=2, timestamps=stamps), 0)
    log.append_as_leader(make_batch(count=3, timestamps=[10, 5000, 5000]), 0)  # a tie, later: not it
    assert len(log.segments) > 2
    assert max_timestamp_offset(log.segments, log.log_start_offset) == (14, 5000)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(15)  # the record with it is gone: the tie's first record is next
    assert max_timestamp_offset(log.segments, log.log_start_offset) == (61, 5000)


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(77_000)
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(make_batch(count=3, timestamp=5), 0)
    assert info.log_append_time_ms == 77_000
    data = log.read(0, 1000)
    header = read_header(data)
    assert header.timestamp_type == 1 and header.max_timestamp == 77_000 and crc_ok(data, 0, header)
    assert log.offset_for_timestamp(70_000) == (0, 77_000)
    assert log.offset_for_timestamp(77_001) is None


def test_offset_for_timestamp_skips_records_below_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch(count=4, timestamps=[10, 20, 30, 40]), 0)
    log.append_as_leader(make_batch(count=2, timestamps=[50, 60]), 0)
    log.high_watermark = log.log_end_offset
    log.delete_records_before(2)
    assert log.offset_for_timestamp(15) == (2, 30)
    assert log.offset_for_timestamp(45) == (4, 50)


def test_timestamp_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path, Clock(100_000), message_timestamp_before_max_ms=1000)
    log.append_as_leader(make_batch(timestamp=99_500), 0)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(make_batch(timestamp=98_000), 0)
    assert err.value.code is ErrorCode.INVALID_TIMESTAMP


def test_high_watermark_clamped_and_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)
    log.high_watermark = 100
    assert log.high_watermark == 6 == log.last_stable_offset
    log.high_watermark = -5
    assert log.high_watermark == 0


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    fill(log, 12)
    log.high_watermark = 36
    assert log.truncate_to(16)  # inside batch 15..17: the whole batch goes
    assert log.log_end_offset == 15 and log.high_watermark == 15
    assert offsets_in(log.read(0, 1 << 20))[-1] == (12, 14)
    assert not log.truncate_to(100)
    info = log.append_as_leader(make_batch(count=3), 1)
    assert info.base_offset == 15
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (500, 500, 500)
    assert log.append_as_leader(make_batch(), 0).base_offset == 500
    assert os.path.exists(os.path.join(log.dir, f"{500:020d}.log"))


def test_delete_records_before(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    fill(log, 12)
    log.high_watermark = log.log_end_offset
    with pytest.raises(KafkaError):
        log.delete_records_before(100)
    first_segments = len(log.segments)
    assert log.delete_records_before(20) == 20
    assert log.log_start_offset == 20
    assert len(log.segments) < first_segments
    assert log.segments[0].base_offset <= 20
    with pytest.raises(KafkaError):
        log.read(19, 100)
    assert offsets_in(log.read(20, 100))[0] == (18, 20)
    assert log.delete_records_before(5) == 20


def test_retention_by_time(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    log = open_log(tmp_path, clock, segment_bytes=300, retention_ms=10_000)
    for i in range(12):
        log.append_as_leader(make_batch(count=3, timestamp=900_000 + 10_000 * i), 0)
    log.high_watermark = log.log_end_offset
    segments_before = [(s.base_offset, s.max_timestamp) for s in log.segments]
    deleted = log.apply_retention(1_000_000)
    expected = sum(1 for _, ts in segments_before if 1_000_000 - ts > 10_000)
    assert deleted == expected > 0
    assert log.log_start_offset == log.segments[0].base_offset
    assert log.apply_retention(1_000_000) == 0


def test_retention_deletes_everything_then_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, retention_ms=10)
    fill(log, 12, timestamp=5)
    leo = log.log_end_offset
    log.high_watermark = leo
    log.apply_retention(1_000_000)
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == leo
    assert log.append_as_leader(make_batch(), 0).base_offset == leo


def test_retention_respects_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, retention_ms=10)
    fill(log, 12, timestamp=5)
    assert log.apply_retention(1_000_000) == 0  # nothing is below the high watermark yet


def test_retention_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, retention_bytes=600)
    fill(log, 20)
    log.high_watermark = log.log_end_offset
    log.apply_retention(0)
    assert log.size_bytes >= 600 - 300 and sum(s.size for s in log.segments[1:]) < 600


def test_idempotent_duplicate_returns_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 1)
    first = log.append_as_leader(idempotent_batch(7, 0, 0, count=2), 0)
    second = log.append_as_leader(idempotent_batch(7, 0, 2, count=3), 0)
    dup = log.append_as_leader(idempotent_batch(7, 0, 0, count=2), 0)
    assert (first.base_offset, second.base_offset) == (3, 5)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (3, 4)
    assert log.log_end_offset == 8


def test_idempotent_sequence_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent_batch(7, 1, 40), 0)  # unknown producer: any sequence
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(idempotent_batch(7, 1, 42), 0)  # gap
    assert err.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(idempotent_batch(7, 0, 41), 0)  # fenced epoch
    assert err.value.code is ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(idempotent_batch(7, 2, 5), 0)  # a new epoch must start at 0
    assert err.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(idempotent_batch(7, 2, 0), 0)
    log.append_as_leader(idempotent_batch(7, 2, 1), 0)
    assert log.log_end_offset == 3


def test_idempotent_sequence_wraps(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent_batch(9, 0, 2**31 - 2, count=2), 0)
    log.append_as_leader(idempotent_batch(9, 0, 0, count=1), 0)
    assert log.log_end_offset == 3


def test_failed_request_leaves_producer_state_unchanged(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent_batch(7, 0, 0), 0)
    bad = idempotent_batch(7, 0, 1) + idempotent_batch(7, 0, 5)
    with pytest.raises(KafkaError):
        log.append_as_leader(bad, 0)
    assert log.append_as_leader(idempotent_batch(7, 0, 1), 0).base_offset == 1


def test_producer_state_survives_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(idempotent_batch(7, 0, 0, count=2), 0)
    log.close()
    log = open_log(tmp_path)
    dup = log.append_as_leader(idempotent_batch(7, 0, 0, count=2), 0)
    assert dup.duplicate and dup.base_offset == 0
    with pytest.raises(KafkaError):
        log.append_as_leader(idempotent_batch(7, 0, 5), 0)


def test_leader_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 2)  # epoch 0: offsets 0..5
    log.append_as_leader(make_batch(count=3), 2)  # epoch 2 from 6
    log.append_as_leader(make_batch(count=3), 5)  # epoch 5 from 9
    assert log.leader_epoch_end_offset(0) == (0, 6)
    assert log.leader_epoch_end_offset(1) == (0, 6)
    assert log.leader_epoch_end_offset(2) == (2, 9)
    assert log.leader_epoch_end_offset(5) == (5, 12)
    assert log.leader_epoch_end_offset(9) == (-1, -1)
    log.truncate_to(9)
    assert log.leader_epoch_end_offset(2) == (2, 9)  # epoch 2 is now the latest and ends at the LEO
    assert log.leader_epoch_end_offset(5) == (-1, -1)
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.leader_epoch_cache.entries == log.leader_epoch_cache.entries
    os.unlink(os.path.join(reopened.dir, "leader-epoch-checkpoint"))
    reopened.close()
    os.unlink(os.path.join(reopened.dir, "leader-epoch-checkpoint"))
    rebuilt = open_log(tmp_path)  # rebuilt from batch headers
    assert [tuple(e) for e in rebuilt.leader_epoch_cache.entries] == [(0, 0), (2, 6)]


def test_append_as_follower(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(make_batch(count=3), 4)
    leader.append_as_leader(idempotent_batch(3, 0, 0, count=2), 5)
    data = leader.read(0, 1 << 20)
    follower = open_log(tmp_path / "follower")
    assert follower.append_as_follower(data + data[:30]) == 5
    assert follower.read(0, 1 << 20) == data
    assert follower.leader_epoch_end_offset(4) == (4, 3)
    with pytest.raises(KafkaError):
        follower.append_as_follower(data)  # offsets do not continue the log
    assert follower.append_as_leader(idempotent_batch(3, 0, 0, count=2), 5).duplicate


def test_restart_recovers_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=60)
    fill(log, 25)
    before = log.read(0, 1 << 20)
    summaries = log.segment_summaries()
    log.close()
    reopened = open_log(tmp_path, segment_bytes=400, index_interval_bytes=60)
    assert reopened.read(0, 1 << 20) == before
    assert reopened.segment_summaries() == summaries
    assert reopened.log_end_offset == 75
    assert reopened.append_as_leader(make_batch(), 0).base_offset == 75


def _active_log_file(log: PartitionLog) -> str:
    return log.active_segment.log_path


@pytest.mark.parametrize("damage", ["cut", "garbage", "flip", "zeros"])
def test_torn_tail_truncated_on_reopen(tmp_path: Path, damage: str) -> None:
    log = open_log(tmp_path, segment_bytes=700)
    fill(log, 10)
    whole = log.read(0, 1 << 20)
    last_size = len(make_batch(count=3))
    path = _active_log_file(log)
    log.close()
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        if damage == "cut":
            f.truncate(size - 7)
        elif damage == "flip":
            f.seek(size - 3)
            byte = f.read(1)[0]
            f.seek(size - 3)
            f.write(bytes([byte ^ 0x40]))
        else:
            f.seek(size)
            f.write(os.urandom(100) if damage == "garbage" else bytes(100))
    reopened = open_log(tmp_path, segment_bytes=700)
    expected = whole if damage in ("garbage", "zeros") else whole[:-last_size]
    assert reopened.read(0, 1 << 20) == expected
    assert reopened.log_end_offset == (30 if damage in ("garbage", "zeros") else 27)
    assert reopened.append_as_leader(make_batch(), 0).base_offset == reopened.log_end_offset - 1


def test_corrupt_index_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=60)
    fill(log, 20)
    log.close()
    index_path = os.path.join(log.dir, f"{0:020d}.index")
    with open(index_path, "ab") as f:
        f.write(b"\x01\x02\x03")
    reopened = PartitionLog(log.dir, LogConfig(index_interval_bytes=60), Clock(), clean_shutdown=True)
    assert reopened.recovered_segments == 1
    assert os.path.getsize(index_path) % 8 == 0
    assert offsets_in(reopened.read(31, 1))[0] == (30, 32)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_offset_for_timestamp_inside_compressed_batch(tmp_path: Path, codec: int) -> None:
    from strom.protocol.records.builder import build_batch, decode_batches

    log = open_log(tmp_path)
    records = [(None, b"v%d" % i, (), 100 + 10 * i) for i in range(8)]
    log.append_as_leader(build_batch(records, compression=codec), 0)
    assert log.offset_for_timestamp(135) == (4, 140)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(171) is None
    [decoded] = decode_batches(log.read(0, 1 << 20))
    assert [r.value for r in decoded.records] == [b"v%d" % i for i in range(8)]


def test_a_writable_payload_is_patched_in_place_and_other_bytes_are_copied(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(make_batch(count=3), 0)
    frame = bytearray(make_batch(count=2))  # as the network layer receives a request
    log.append_as_leader(memoryview(frame), 7)
    assert read_header(frame).base_offset == 3 and read_header(frame).partition_leader_epoch == 7
    payload = make_batch(count=2)
    log.append_as_leader(payload, 7)
    assert read_header(payload).base_offset == 0  # a read-only payload is left as it was
    assert offsets_in(log.read(0, 1 << 20)) == [(0, 2), (3, 4), (5, 6)]
    assert log.read(3, 1 << 20).startswith(bytes(frame))


def test_a_sequential_reader_needs_no_header_scan_to_find_its_next_batch(tmp_path: Path) -> None:
    # More appends than a segment remembers positions for, then fetches that each take one batch and
    # stop inside the next: every fetch must start where the last one was cut, without find_batch.
    log = open_log(tmp_path, index_interval_bytes=100)
    fill(log, 100, count=4, value_size=50)
    log.high_watermark = log.log_end_offset
    segment = log.active_segment
    batch_size = read_header(segment.read_bytes(0, 61)).size
    scans: list[int] = []
    find_batch = segment.find_batch

    def counting_find_batch(offset: int) -> object:
        scans.append(offset)
        return find_batch(offset)

    segment.find_batch = counting_find_batch  # type: ignore[method-assign]
    offset, served = 0, []
    while offset < log.log_end_offset:
        data = log.read(offset, batch_size + batch_size // 2, log.high_watermark)
        served += offsets_in(data)
        offset = offsets_in(data)[-1][1] + 1
    assert served == [(4 * i, 4 * i + 3) for i in range(100)]
    assert scans == []
