"""Tiered storage's pure parts: remote segment states and records, the per-partition metadata replay,
and the copy / local-retention / total-retention decisions."""

from __future__ import annotations

import pytest

from strom._util.states import RefusedTransition
from strom.storage.checkpoint import EpochEntry
from strom.storage.config import LogConfig
from strom.storage.retention import (
    SAME_AS_TOTAL,
    RetentionPolicy,
    SegmentSummary,
    local_limit,
    remote_prefix,
    segments_to_delete,
)
from strom.tiered.metadata_cache import RemotePartitionMetadata
from strom.tiered.plan import orphans_to_delete, remote_segments_to_delete, segments_to_copy
from strom.tiered.segment_data import segment_epochs
from strom.tiered.segment_metadata import (
    CorruptMetadataRecordError,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    decode,
)

S = RemoteLogSegmentState


def metadata(
    segment_id: str, start: int, end: int, state: S = S.COPY_SEGMENT_FINISHED, size: int = 100, ts: int = 1000
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        topic_id="tid",
        topic="orders",
        partition=3,
        segment_id=segment_id,
        start_offset=start,
        end_offset=end,
        max_timestamp_ms=ts,
        broker_id=1,
        event_timestamp_ms=5,
        segment_leader_epochs=((0, start), (2, start + 1)),
        segment_size_in_bytes=size,
        txn_index_size=0,
        state=state,
    )


def test_a_record_round_trips_and_is_keyed_by_its_partition() -> None:
    md = metadata("a" * 32, 10, 19)
    key, value = md.encode()
    assert key == b"orders-3"
    assert decode(value) == md


@pytest.mark.parametrize("value", [b"not json", b"{}", b'{"version": 7}', b'{"version": 0, "state": "NOPE"}'])
def test_foreign_values_are_corrupt_records(value: bytes) -> None:
    with pytest.raises(CorruptMetadataRecordError):
        decode(value)


def test_states_follow_kafkas_rule_book() -> None:
    started = metadata("s", 0, 9, S.COPY_SEGMENT_STARTED)
    finished = started.moved_to(S.COPY_SEGMENT_FINISHED, 7)
    assert (finished.state, finished.event_timestamp_ms) == (S.COPY_SEGMENT_FINISHED, 7)
    assert started.moved_to(S.DELETE_SEGMENT_STARTED, 8).state is S.DELETE_SEGMENT_STARTED
    with pytest.raises(RefusedTransition):
        started.moved_to(S.DELETE_SEGMENT_FINISHED, 9)
    with pytest.raises(RefusedTransition):
        finished.moved_to(S.COPY_SEGMENT_STARTED, 9)


def test_only_finished_copies_make_the_remote_log() -> None:
    cache = RemotePartitionMetadata()
    assert (cache.highest_copied_offset, cache.log_start_offset) == (-1, None)
    for md in (metadata("a", 0, 9, S.COPY_SEGMENT_STARTED), metadata("b", 10, 19, S.COPY_SEGMENT_STARTED)):
        assert cache.apply(md)
    assert cache.copied_segments() == []
    assert cache.apply(metadata("a", 0, 9))
    assert not cache.apply(metadata("a", 0, 9))  # a duplicate changes nothing
    assert [m.segment_id for m in cache.copied_segments()] == ["a"]
    assert (cache.highest_copied_offset, cache.log_start_offset, cache.size_bytes) == (9, 0, 100)
    assert [m.segment_id for m in cache.segments_in(S.COPY_SEGMENT_STARTED)] == ["b"]


def test_late_or_refused_records_are_ignored_and_finished_deletes_forget() -> None:
    cache = RemotePartitionMetadata()
    cache.apply(metadata("a", 0, 9))  # first seen already finished (older records compacted away)
    cache.apply(metadata("a", 0, 9, S.DELETE_SEGMENT_STARTED))
    assert not cache.apply(metadata("a", 0, 9))  # an older record replayed late
    assert cache.copied_segments() == []
    assert cache.apply(metadata("a", 0, 9, S.DELETE_SEGMENT_FINISHED))
    assert cache.segments_in(*S) == []
    assert not cache.apply(metadata("z", 0, 9, S.DELETE_SEGMENT_FINISHED))


def test_segment_for_an_offset_or_the_next_one_after_a_gap() -> None:
    cache = RemotePartitionMetadata()
    for md in (metadata("a", 0, 9, ts=100), metadata("b", 20, 29, ts=300)):
        cache.apply(md)
    assert [cache.segment_for(o).segment_id for o in (0, 9, 15, 29) if cache.segment_for(o)] == [
        "a",
        "a",
        "b",
        "b",
    ]
    assert cache.segment_for(30) is None
    found = cache.segment_for_timestamp(150)
    assert found is not None and found.segment_id == "b"
    assert cache.segment_for_timestamp(301) is None


def test_overlapping_segments_of_two_leaders_leave_no_hole() -> None:
    """The old leader copied [980, 1119]; the new one's local segment [880, 1159] overlaps it."""
    cache = RemotePartitionMetadata()
    for md in (metadata("old", 840, 979), metadata("old2", 980, 1119), metadata("new", 880, 1159)):
        cache.apply(md)
    cache.apply(metadata("next", 1160, 1299))
    found = {o: cache.segment_for(o) for o in (900, 1000, 1119, 1120, 1159, 1160)}
    assert {o: m.segment_id for o, m in found.items() if m} == {
        900: "new",
        1000: "new",
        1119: "new",
        1120: "new",
        1159: "new",
        1160: "next",
    }


def test_a_reload_from_a_lagging_replica_never_makes_a_finished_copy_look_unfinished() -> None:
    """The acceptance run's lost segment: a leader recorded COPY_SEGMENT_FINISHED (local retention then
    dropped those offsets), its leader epoch changed, and its reload read a metadata replica whose high
    watermark was still below that record. Replacing the state made the segment an 'orphan' in
    COPY_SEGMENT_STARTED, which the clean-up deleted: a hole in the log. Absorbing the reload keeps it."""
    known = RemotePartitionMetadata("tid")
    for md in (metadata("a", 0, 9, S.COPY_SEGMENT_STARTED), metadata("a", 0, 9)):
        known.apply(md)  # this broker's own records, published and committed
    lagging = RemotePartitionMetadata("tid")
    lagging.apply(metadata("a", 0, 9, S.COPY_SEGMENT_STARTED))  # the replica had not the FINISHED yet
    lagging.apply(metadata("b", 10, 19, S.COPY_SEGMENT_STARTED))  # a real orphan (another leader's)
    assert lagging.segments_in(S.COPY_SEGMENT_STARTED)[0].segment_id == "a"  # the bad choice
    known.absorb(lagging)
    assert [m.segment_id for m in known.segments_in(S.COPY_SEGMENT_STARTED)] == ["b"]
    assert [m.segment_id for m in known.copied_segments()] == ["a"]
    assert known.highest_copied_offset == 9

    # Deletions a reload saw are taken in, and no later lagging reload brings the segment back.
    deleted = RemotePartitionMetadata("tid")
    for state in (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED):
        deleted.apply(metadata("a", 0, 9, state))
    deleted.apply(metadata("a", 0, 9, S.DELETE_SEGMENT_FINISHED))
    known.absorb(deleted)
    assert known.copied_segments() == [] and known.highest_copied_offset == -1
    known.absorb(lagging)
    assert known.copied_segments() == [] and not known.apply(metadata("a", 0, 9))


def test_the_log_start_is_the_remote_start_or_delete_records_offset_above_it() -> None:
    cache = RemotePartitionMetadata()
    assert cache.log_start(0) is None  # nothing remote: the log starts locally
    for md in (metadata("a", 100, 199), metadata("b", 200, 299)):
        cache.apply(md)
    assert cache.log_start(0) == (100, 0)  # the remote log's start, its first epoch
    assert cache.log_start(100) == (100, 0)
    assert cache.log_start(150) == (150, 2)  # DeleteRecords inside a segment: the epoch in force there
    assert cache.log_start(250) == (250, 2)
    assert cache.log_start(300) is None  # beyond the remote log: the local log start moved with it


def seg(base: int, nxt: int, size: int = 100, ts: int = 1000) -> SegmentSummary:
    return SegmentSummary(base, nxt, size, ts)


def test_copy_takes_rolled_segments_below_the_last_stable_offset_not_yet_remote() -> None:
    local = [seg(0, 10), seg(10, 20), seg(20, 30), seg(30, 35)]  # the last one is active
    assert segments_to_copy(local, 35, -1) == local[:3]
    assert segments_to_copy(local, 25, -1) == local[:2]  # an open transaction or the HW at 25
    assert segments_to_copy(local, 35, 19) == local[2:3]
    assert segments_to_copy(local[-1:], 35, -1) == []  # never the active segment
    assert segments_to_copy([seg(0, 0), seg(0, 5)], 5, -1) == []  # nor an empty one


def test_local_retention_deletes_only_what_is_remote() -> None:
    local = [seg(0, 10), seg(10, 20), seg(20, 30), seg(30, 35)]
    policy = RetentionPolicy.local_of(LogConfig(remote_storage_enable=True, local_retention_bytes=150))
    count = segments_to_delete(local, policy, 0, 0, 35)
    assert count == 2  # 400 bytes, 150 kept
    assert [remote_prefix(local, count, highest) for highest in (-1, 9, 29)] == [0, 1, 2]
    assert local_limit(1000, SAME_AS_TOTAL) == 1000
    assert local_limit(1000, 10) == 10
    assert RetentionPolicy.local_of(LogConfig(retention_ms=500)) == RetentionPolicy(500, -1, True)


def test_total_retention_by_time_size_and_log_start() -> None:
    remote = [metadata("a", 0, 9, ts=100), metadata("b", 10, 19, ts=200), metadata("c", 20, 29, ts=300)]

    def ids(result: list[RemoteLogSegmentMetadata]) -> list[str]:
        return [m.segment_id for m in result]

    assert ids(remote_segments_to_delete(remote, RetentionPolicy(150, -1, True), 360, 0, 0)) == ["a", "b"]
    # 300 remote + 100 local-only bytes: 250 allowed lets one segment go, 200 allowed two.
    assert ids(remote_segments_to_delete(remote, RetentionPolicy(-1, 250, True), 0, 0, 100)) == ["a"]
    assert ids(remote_segments_to_delete(remote, RetentionPolicy(-1, 200, True), 0, 0, 100)) == ["a", "b"]
    assert ids(remote_segments_to_delete(remote, RetentionPolicy(-1, -1, False), 10**9, 20, 0)) == ["a", "b"]
    assert remote_segments_to_delete(remote, RetentionPolicy(-1, -1, True), 10**9, 0, 0) == []


def test_segment_epochs_start_with_the_epoch_in_force() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(3, 15), EpochEntry(5, 40)]
    assert segment_epochs(entries, 10, 19) == [EpochEntry(0, 10), EpochEntry(3, 15)]
    assert segment_epochs(entries, 15, 39) == [EpochEntry(3, 15)]
    assert segment_epochs(entries, 40, 49) == [EpochEntry(5, 40)]
    assert segment_epochs([], 0, 9) == []


def test_an_orphan_is_deleted_only_once_finished_segments_hold_its_offsets() -> None:
    copied = [metadata("a", 0, 99), metadata("b", 100, 199), metadata("d", 300, 399)]
    started = S.COPY_SEGMENT_STARTED
    re_copied = metadata("x", 100, 199, started)  # its range was copied again: safe
    straddling = metadata("y", 150, 249, started)  # 200-249 held by no one
    in_the_gap = metadata("z", 200, 299, started)  # maybe the only copy of 200-299 (a stale view)
    below_start = metadata("w", 0, 49, started)
    assert orphans_to_delete([below_start, re_copied, straddling, in_the_gap], copied) == [
        below_start,
        re_copied,
    ]
    # Overlapping finished segments (a new leader cut its segments elsewhere) hold a range together.
    overlapping = [metadata("a", 0, 120), metadata("b", 100, 260), metadata("c", 250, 400)]
    assert orphans_to_delete([in_the_gap, straddling], overlapping) == [in_the_gap, straddling]
    # A stale view that has seen no finished segment deletes nothing.
    assert orphans_to_delete([re_copied], []) == []
    # Below the remote start means expired (or never needed); held from there on.
    assert orphans_to_delete([metadata("v", 0, 150, started)], copied[1:]) == [metadata("v", 0, 150, started)]
