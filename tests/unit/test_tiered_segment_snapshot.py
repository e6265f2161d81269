"""Regenerating a rolled segment's producer snapshot once the log has deleted it (KAFKA-15195): the
snapshot built from a start state and the segment's batch headers equals the one the log wrote at the
roll, for idempotent and transactional producers (an ABORT and a COMMIT marker included)."""

from __future__ import annotations

import os
from pathlib import Path

from strom.protocol.records.builder import build_batch
from strom.protocol.records.control import ControlType
from strom.storage import producer_snapshot
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.producer_snapshot import SnapshotEntry
from strom.tiered.segment_snapshot import StartState, snapshot_at


def _batch(producer_id: int, sequence: int, transactional: bool = False) -> bytes:
    record = (b"k", b"v" * 120, (), 1_000 + sequence)
    return build_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=transactional,
    )


def _filled_log(tmp_path: Path) -> tuple[PartitionLog, dict[int, bytes]]:
    """A log of many small segments written by two idempotent producers and a transactional one, and
    every roll's snapshot as the log wrote it (next offset -> file bytes), captured before it went."""
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=1200))
    written: dict[int, bytes] = {}
    for i in range(60):
        log.append_as_leader(_batch(7, i), leader_epoch=0)
        if i < 25:  # producer 8 stops early: only the snapshots carry it on
            log.append_as_leader(_batch(8, i), leader_epoch=0)
        if i % 10 == 3:
            log.append_as_leader(_batch(9, i // 10, transactional=True), leader_epoch=0)
        if i % 10 == 6:
            ending = ControlType.ABORT if i % 20 == 6 else ControlType.COMMIT
            log.append_marker(9, 0, ending, coordinator_epoch=3, leader_epoch=0)
        for offset in producer_snapshot.list_offsets(log.dir):
            written.setdefault(offset, (Path(log.dir) / f"{offset:020d}.snapshot").read_bytes())
    assert len(log.segments) > 8
    return log, written


def _rows(data: bytes | None) -> list[SnapshotEntry]:
    assert data is not None
    return sorted(producer_snapshot.decode(data))


def test_a_chain_of_regenerated_snapshots_matches_what_the_log_wrote(tmp_path: Path) -> None:
    log, written = _filled_log(tmp_path)
    kept = producer_snapshot.list_offsets(log.dir)
    assert len(kept) == 2  # the older ones are gone
    previous = StartState(log.segments[0].base_offset, [])  # nothing precedes the first segment
    for segment in log.segments[:-1]:
        end = segment.next_offset
        regenerated = snapshot_at(log, segment, end, previous)
        assert _rows(regenerated) == _rows(written[end])
        assert any(r.producer_id == 8 for r in _rows(regenerated))
        previous = StartState(end, _rows(regenerated))
    # Without a start, an old segment whose snapshot is gone is uploaded without one.
    assert snapshot_at(log, log.segments[3], log.segments[3].next_offset, None) is None


def test_a_local_snapshot_below_the_end_is_a_start(tmp_path: Path) -> None:
    log, written = _filled_log(tmp_path)
    segment = log.segments[-2]
    own, older = producer_snapshot.list_offsets(log.dir)[-1], producer_snapshot.list_offsets(log.dir)[0]
    assert own == segment.next_offset and older == segment.base_offset
    assert snapshot_at(log, segment, own, None) == written[own]  # still there: read as it is
    os.unlink(producer_snapshot.path_for(log.dir, own))
    assert _rows(snapshot_at(log, segment, own, None)) == _rows(written[own])  # from the older one
