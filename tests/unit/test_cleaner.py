"""Log cleaner: pure decisions (compaction.py, offset_map.py) and cleaning real segment files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cleaner_support import COMPACT, Fixture, assert_compacted_view, latest_by_key

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import DELETE_HORIZON_BIT, iter_headers
from strom.protocol.records.builder import build_batch, decode_batches
from strom.protocol.records.compression import CompressionType
from strom.protocol.records.record import Record
from strom.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, LogCleaner
from strom.storage.compaction import (
    Candidate,
    LogToClean,
    choose_log,
    first_uncleanable_offset,
    group_segments,
    log_to_clean,
    retain_record,
    valid_first_dirty_offset,
)
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_validator import InvalidRecordsError, RecordError, require_keys
from strom.storage.offset_map import OffsetMap, iter_record_keys, record_payload
from strom.storage.retention import SegmentSummary


# -- pure parts ----------------------------------------------------------------------------------
def test_offset_map_keeps_latest_offset_and_bounds_entries() -> None:
    m = OffsetMap(max_entries=2)
    m.put(b"a", 1)
    m.put(b"a", 5)
    m.put(b"b", 3)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c"), m.latest_offset, len(m)) == (5, 3, -1, 5, 2)
    assert m.room_for([b"a", b"b"])
    assert not m.room_for([b"c"])
    with pytest.raises(ValueError, match="at least one"):
        OffsetMap(0)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_record_keys_are_read_without_decoding_values(codec: CompressionType) -> None:
    batch = build_batch(
        [(b"k1", b"v" * 100, (("h", b"x"),), 1), (None, b"v", (), 2), (b"k3", None, (), 3)],
        base_offset=40,
        compression=codec,
    )
    header = next(iter_headers(batch))[1]
    keys = list(iter_record_keys(record_payload(batch, header), header))
    assert keys == [(40, b"k1"), (41, None), (42, b"k3")]


def test_require_keys_rejects_a_keyless_record_with_invalid_record() -> None:
    good = build_batch([(b"k", b"v", (), 1)], compression=CompressionType.GZIP)
    require_keys(good, list(iter_headers(good)))
    bad = build_batch([(b"k", b"v", (), 1), (None, b"v", (), 1)], compression=CompressionType.LZ4)
    with pytest.raises(KafkaError) as info:
        require_keys(bad, list(iter_headers(bad)))
    assert info.value.code == ErrorCode.INVALID_RECORD


def test_require_keys_names_every_keyless_record_by_its_index_in_its_batch() -> None:
    first = build_batch([(None, b"v", (), 1), (b"k", b"v", (), 1), (None, b"v", (), 1)])
    second = build_batch([(b"k", b"v", (), 1), (None, b"v", (), 1)])
    payload = first + second
    with pytest.raises(InvalidRecordsError) as info:
        require_keys(payload, list(iter_headers(payload)), "t-3")
    message = "Compacted topic cannot accept message without key in topic partition t-3."
    assert info.value.record_errors == (
        RecordError(0, message),
        RecordError(2, message),
        RecordError(1, message),
    )
    assert info.value.code is ErrorCode.INVALID_RECORD and "3 record(s)" in str(info.value.message)


@pytest.mark.parametrize(
    ("offset", "key", "tombstone", "latest", "past_horizon", "kept"),
    [
        (5, b"k", False, 5, False, True),  # the latest record of its key
        (5, b"k", False, -1, False, True),  # key not in the dirty section: already the latest
        (5, b"k", False, 9, False, False),  # superseded
        (5, b"k", True, 5, False, True),  # tombstone before its delete horizon
        (5, b"k", True, 5, True, False),  # tombstone after its delete horizon
        (5, b"k", False, 5, True, True),  # the horizon only concerns tombstones
        (5, None, False, -1, False, False),  # keyless: dropped
    ],
)
def test_retain_record(
    offset: int, key: bytes | None, tombstone: bool, latest: int, past_horizon: bool, kept: bool
) -> None:
    assert retain_record(offset, key, tombstone, latest, past_horizon) is kept


def seg(base: int, nxt: int, size: int = 100, ts: int = 0) -> SegmentSummary:
    return SegmentSummary(base, nxt, size, ts)


def test_first_uncleanable_offset_is_the_active_segment_at_the_latest() -> None:
    segments = [seg(0, 10), seg(10, 20), seg(20, 25)]
    assert first_uncleanable_offset(segments, now_ms=0, min_compaction_lag_ms=0, high_watermark=25) == 20
    # A segment not wholly below the high watermark, and a segment newer than the compaction lag.
    assert first_uncleanable_offset(segments, now_ms=0, min_compaction_lag_ms=0, high_watermark=15) == 10
    assert first_uncleanable_offset(segments, now_ms=0, min_compaction_lag_ms=0, high_watermark=9) == 0
    newer = [seg(0, 10, ts=100), seg(10, 20, ts=990), seg(20, 25, ts=999)]
    assert first_uncleanable_offset(newer, now_ms=1000, min_compaction_lag_ms=50, high_watermark=25) == 10


def test_dirty_ratio_counts_whole_segments_of_each_section() -> None:
    segments = [seg(0, 10, 100), seg(10, 20, 300), seg(20, 30, 100), seg(30, 31, 50)]
    ltc = log_to_clean(
        segments,
        log_start_offset=0,
        first_dirty_offset=10,
        now_ms=0,
        min_compaction_lag_ms=0,
        high_watermark=31,
    )
    assert ltc == LogToClean(0, 10, 30, 100, 400)
    assert ltc.cleanable_ratio == pytest.approx(0.8)
    assert valid_first_dirty_offset(None, 5, 50) == 5
    assert valid_first_dirty_offset(60, 5, 50) == 5
    assert valid_first_dirty_offset(3, 5, 50) == 5
    assert valid_first_dirty_offset(20, 5, 50) == 20


def test_choose_log_picks_the_filthiest_above_its_ratio_then_expired_tombstones() -> None:
    def cand(clean: int, dirty: int, ratio: float, horizon: int | None = None) -> Candidate:
        return Candidate(LogToClean(0, 10, 20, clean, dirty), ratio, horizon)

    assert choose_log([cand(50, 50, 0.5), cand(10, 90, 0.5), cand(0, 100, 1.1)], now_ms=0) == 1
    assert choose_log([cand(90, 10, 0.5), cand(80, 20, 0.5)], now_ms=0) is None
    # Nothing dirty enough: a log whose tombstones' delete horizon has passed gets cleaned.
    assert choose_log([cand(90, 10, 0.5, horizon=500), cand(90, 10, 0.5, horizon=100)], now_ms=600) == 1
    assert choose_log([cand(90, 10, 0.5, horizon=700)], now_ms=600) is None


def test_group_segments_fill_up_to_segment_bytes() -> None:
    segments = [seg(0, 10, 400), seg(10, 20, 400), seg(20, 30, 400), seg(30, 40, 900), seg(40, 50, 10)]
    assert group_segments(segments, 1000) == [[0, 1], [2], [3, 4]]
    assert group_segments([seg(0, 1 << 31, 1), seg(1 << 31, (1 << 31) + 5, 1)], 1000) == [[0], [1]]


# -- cleaning real logs --------------------------------------------------------------------------
def fill(fx: Fixture, keys: int, updates: int, compression: int = 0, per_batch: int = 1) -> None:
    n = 0
    for _ in range(updates):
        for start in range(0, keys, per_batch):
            fx.append(
                [(b"key-%d" % k, b"value-%d" % (n + k)) for k in range(start, min(keys, start + per_batch))],
                compression=compression,
            )
        n += keys


def test_many_updates_per_key_compact_to_the_latest_value(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fill(fx, keys=20, updates=30)
    original = fx.rows()
    active, active_size, leo = fx.log.active_segment, fx.log.active_segment.size, fx.log.log_end_offset
    size_before = fx.log.size_bytes
    stats = fx.cleaner.clean_once()
    assert stats is not None and stats.records_removed > 0
    cleaned = fx.rows()
    assert_compacted_view(original, cleaned, tombstones_may_vanish=False)
    assert fx.log.active_segment is active and active.size == active_size
    assert fx.log.log_end_offset == leo
    assert fx.log.size_bytes < size_before / 5
    below_active = [r for r in cleaned if r[0] < active.base_offset]
    assert len({r[1] for r in below_active}) == len(below_active), (
        "one record per key below the active segment"
    )
    assert stats.end_offset == active.base_offset
    checkpoint = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert checkpoint[2] == f"t 0 {active.base_offset}"


def test_second_clean_merges_small_segments_and_is_idempotent(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fill(fx, keys=10, updates=30)
    history = fx.rows()
    fx.cleaner.clean_once()
    segments_after_first = len(fx.log.segments)
    leo = fx.log.log_end_offset
    fill(fx, keys=10, updates=5)
    history += [r for r in fx.rows() if r[0] >= leo]
    fx.cleaner.clean_once()
    assert len(fx.log.segments) < segments_after_first
    assert_compacted_view(history, fx.rows(), tombstones_may_vanish=False)
    assert latest_by_key(fx.rows()) == latest_by_key(history)


@pytest.mark.parametrize("codec", [c for c in CompressionType if c])
def test_compressed_batches_are_filtered_and_recompressed_with_their_codec(
    tmp_path: Path, codec: int
) -> None:
    fx = Fixture(str(tmp_path))
    fill(fx, keys=12, updates=15, compression=codec, per_batch=5)
    original = fx.rows()
    fx.cleaner.clean_once()
    assert_compacted_view(original, fx.rows(), tombstones_may_vanish=False)
    below = fx.log.read(0, 1 << 30, fx.log.active_segment.base_offset)
    headers = [h for _, h in iter_headers(below)]
    assert headers and all(h.compression == codec for h in headers if h.records_count)
    # Offsets of a rewritten batch keep its original span (base offset and last offset delta).
    for batch in decode_batches(below):
        assert batch.last_offset_delta % 5 in (4, 1)  # 5-record batches, or the 2-record tail of 12 keys


def test_tombstones_get_a_delete_horizon_then_vanish_after_delete_retention(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fill(fx, keys=5, updates=10)
    fx.append([(b"key-1", None), (b"key-3", None)])
    fill(fx, keys=1, updates=2)  # key-0 only, to move the tombstones below the active segment
    fx.roll()
    fx.append([(b"key-0", b"last")])
    fx.cleaner.clean_once()
    rows = fx.rows()
    assert (b"key-1", None) in [(k, v) for _, k, v in rows]
    stamped = [h for _, h in iter_headers(fx.log.read(0, 1 << 30)) if h.attributes & DELETE_HORIZON_BIT]
    assert [h.base_timestamp for h in stamped] == [fx.clock.now_ms + COMPACT.delete_retention_ms]
    # Nothing is dirty now and the horizon has not passed: no clean.
    fx.clock.now_ms += COMPACT.delete_retention_ms - 1
    assert fx.cleaner.clean_once() is None
    fx.clock.now_ms += 1
    assert fx.cleaner.clean_once() is not None  # the horizon passed: cleaned without new dirty data
    keys = {k for _, k, _ in fx.rows()}
    assert b"key-1" not in keys and b"key-3" not in keys
    assert {b"key-0", b"key-2", b"key-4"} <= keys


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fx.with_config(min_compaction_lag_ms=60_000)
    fill(fx, keys=10, updates=20)
    assert fx.cleaner.clean_once() is None
    fx.clock.now_ms += 60_001
    fx.roll()
    fx.append([(b"key-0", b"x")])
    assert fx.cleaner.clean_once() is not None


def test_delete_policy_topics_are_not_cleaned_and_accept_keyless_records(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path), COMPACT)
    fx.with_config(cleanup_policy="delete")
    fx.append([(None, b"keyless")])
    fill(fx, keys=5, updates=20)
    assert fx.cleaner.clean_once() is None


def test_keyless_produce_to_a_compacted_log_is_invalid_record(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    leo = fx.log.log_end_offset
    with pytest.raises(KafkaError) as info:
        fx.append([(b"k", b"v"), (None, b"v")], compression=CompressionType.SNAPPY)
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert fx.log.log_end_offset == leo


def test_reopen_after_clean_reads_the_same_log(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fill(fx, keys=8, updates=20, compression=CompressionType.ZSTD, per_batch=3)
    fx.cleaner.clean_once()
    rows, leo = fx.rows(), fx.log.log_end_offset
    fx.reopen(clean=True)
    assert fx.rows() == rows and fx.log.log_end_offset == leo
    assert (
        fx.cleaner.first_dirty_offset(fx.manager.all_logs().popitem()[0]) == fx.log.active_segment.base_offset
    )
    fx.reopen(clean=False)  # unclean: indexes rebuilt from the cleaned files
    assert fx.rows() == rows
    assert not [n for n in os.listdir(fx.log.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_last_batch_of_each_producer_survives_even_empty(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    pid = 7
    fx.append([(b"a", b"1"), (b"b", b"1")], producer_id=pid, producer_epoch=0, base_sequence=0)
    fx.append([(b"a", b"2")], producer_id=pid, producer_epoch=0, base_sequence=2)
    fx.roll()
    fx.append([(b"a", b"3"), (b"b", b"3")])  # supersedes every record of the producer
    fx.roll()
    fx.append([(b"z", b"z")])
    fx.cleaner.clean_once()
    headers = [h for _, h in iter_headers(fx.log.read(0, 1 << 30))]
    producer_batches = [h for h in headers if h.producer_id == pid]
    assert [
        (h.base_offset, h.last_offset_delta, h.base_sequence, h.records_count) for h in producer_batches
    ] == [(2, 0, 2, 0)]
    fx.reopen(clean=False)
    assert fx.log.producer_state.producers[pid].last_seq == 2
    # The producer continues its sequence after the restart; a gap would still be refused.
    fx.append([(b"c", b"4")], producer_id=pid, producer_epoch=0, base_sequence=3)
    with pytest.raises(KafkaError) as info:
        fx.append([(b"c", b"5")], producer_id=pid, producer_epoch=0, base_sequence=9)
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_offset_map_bound_cleans_the_dirty_section_in_rounds(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path), max_map_entries=5)
    for i in range(200):
        fx.append([(b"key-%d" % (i % 40), b"v%d" % i)])
    original = fx.rows()
    first = fx.cleaner.clean_once()
    assert first is not None and first.end_offset < fx.log.active_segment.base_offset
    rounds = 1
    while fx.cleaner.clean_once() is not None:
        rounds += 1
        assert rounds < 50
    assert rounds > 1
    assert_compacted_view(original, fx.rows(), tombstones_may_vanish=False)


def test_reads_between_cleaning_steps_see_a_consistent_log(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path), step_bytes=300)
    fill(fx, keys=15, updates=20, per_batch=2)
    original = fx.rows()
    steps = 0
    for _ in fx.cleaner.clean_steps():
        steps += 1
        assert_compacted_view(original, fx.rows(), tombstones_may_vanish=False)
        fx.append([(b"late-%d" % steps, b"x")])  # appends continue in the active segment
        original = [*original, fx.rows()[-1]]
    assert steps > 10 and fx.cleaner.last_stats is not None
    assert_compacted_view(original, fx.rows(), tombstones_may_vanish=False)


def test_retention_during_a_clean_abandons_it_without_losing_anything(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path), step_bytes=300)
    fill(fx, keys=15, updates=20, per_batch=2)
    steps = fx.cleaner.clean_steps()
    next(steps)
    cut = fx.log.segments[2].base_offset
    fx.log.delete_records_before(cut)  # deletes the first two segments under the cleaner
    original = fx.rows()
    for _ in steps:
        pass
    assert fx.cleaner.last_stats is None
    assert fx.rows() == original
    assert not [n for n in os.listdir(fx.log.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert fx.cleaner.clean_once() is not None  # the next round starts afresh
    assert_compacted_view(original, fx.rows(), tombstones_may_vanish=False)


def test_compact_delete_policy_also_applies_retention(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fx.with_config(cleanup_policy="compact,delete", retention_ms=1_000)
    fill(fx, keys=5, updates=30)
    fx.cleaner.clean_once()
    fx.clock.now_ms += 5_000
    fx.roll()
    fx.append([(b"new", b"x")])
    assert fx.log.apply_retention(fx.clock.now_ms) > 0
    assert [k for _, k, _ in fx.rows()] == [b"new"]


def test_encode_keeps_records_untouched_when_nothing_is_removed(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fx.append([(b"a", b"1"), (b"b", b"2")], compression=CompressionType.GZIP)
    fx.roll()
    fx.append([(b"c", b"3")])
    before = fx.log.read(0, 1 << 30, 2)
    fx.cleaner.clean_once()
    assert fx.log.read(0, 1 << 30, 2) == before  # byte for byte, CRC and codec framing included
    assert isinstance(decode_batches(before)[0].records[0], Record)


def test_a_reloaded_log_takes_its_topic_config_from_the_broker_catalogue(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    fill(fx, keys=5, updates=20)
    fx.manager.shutdown()
    manager = LogManager([str(tmp_path)], LogConfig())  # loaded logs start with the default config
    assert manager.get_or_create_log("t", 0).config.cleanup_policy == "delete"
    assert manager.get_or_create_log("t", 0, COMPACT).config == COMPACT
    assert LogCleaner(manager, fx.clock).clean_once() is not None
