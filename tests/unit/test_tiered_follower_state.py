"""A follower's log restarted at its tiered leader's local log start (strom.tiered.follower_state): the
epoch history it keeps, and the producer state it takes from a remote segment's snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_producer_snapshot import open_log, produce
from test_storage_support import idempotent_batch

from strom.storage import producer_snapshot
from strom.storage.checkpoint import (
    CorruptCheckpointError,
    EpochEntry,
    parse_leader_epochs,
    render_leader_epochs,
)
from strom.storage.log import PartitionLog
from strom.storage.producer_state import to_snapshot_entry
from strom.tiered.follower_state import epochs_at_local_start, start_log_at

E = EpochEntry


@pytest.mark.parametrize(
    ("remote", "local_start", "epoch", "expected"),
    [
        ([E(0, 0), E(2, 100)], 150, 2, [E(2, 150)]),  # the epoch in force moves to the start
        ([E(0, 0), E(2, 100)], 150, 3, [E(3, 150)]),  # a newer epoch begins at the local start
        ([E(0, 0), E(2, 100), E(5, 150)], 150, 2, [E(2, 150)]),  # nothing at or past the start is kept
        ([], 150, 4, [E(4, 150)]),  # no remote segment ends there: the leader's epoch alone
        ([], 150, -1, []),
    ],
)
def test_epochs_at_local_start(remote: list[E], local_start: int, epoch: int, expected: list[E]) -> None:
    assert epochs_at_local_start(remote, local_start, epoch) == expected


def test_the_checkpoint_text_round_trips_and_damage_is_refused() -> None:
    entries = [E(0, 0), E(3, 120)]
    assert parse_leader_epochs(render_leader_epochs(entries)) == entries
    for bad in ("0\n2\n0 0\n", "1\n1\n0 0\n", "0\n1\nx 0\n", ""):
        with pytest.raises(CorruptCheckpointError):
            parse_leader_epochs(bad)


def test_a_follower_starts_with_the_leaders_epochs_and_producer_state(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    produce(leader, 7, 0, 40)  # rolls several times (600-byte segments)
    start = leader.segments[-1].base_offset
    entries = [to_snapshot_entry(e) for e in leader.producer_state.producers.values()]

    follower = open_log(tmp_path / "follower")
    produce(follower, 9, 0, 2)  # a stale log, replaced entirely
    start_log_at(follower, start, [E(4, start)], entries, 1_000_000)
    assert (follower.log_start_offset, follower.log_end_offset) == (start, start)
    assert follower.leader_epoch_cache.entries == [E(4, start)]
    assert set(follower.producer_state.producers) == {7}
    assert follower.producer_state.producers[7].last_seq == 79
    assert producer_snapshot.list_offsets(follower.dir) == [start]

    # The leader's next batch of producer 7 appends in sequence; the state survives a restart.
    batch = idempotent_batch(7, 0, 80, count=2, timestamp=1_000_000, base_offset=start, leader_epoch=4)
    follower.append_as_follower(batch)
    assert follower.log_end_offset == start + 2
    follower.close()
    reopened = PartitionLog(follower.dir, follower.config, lambda: 1_000_000)
    assert reopened.log_start_offset == start
    assert reopened.leader_epoch_cache.entries == [E(4, start)]
    assert reopened.producer_state.producers[7].last_seq == 81


def test_without_a_snapshot_the_producer_state_starts_empty(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "follower")
    produce(follower, 9, 0, 2)
    start_log_at(follower, 500, [E(1, 500)], None, 1_000_000)
    assert follower.producer_state.producers == {}
    assert (follower.log_start_offset, follower.leader_epoch_cache.entries) == (500, [E(1, 500)])
