"""Producer-state snapshots (`<offset>.snapshot`) and producer.id.expiration.ms."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_storage_support import idempotent_batch, make_batch

from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage import producer_snapshot
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.log_manager import LogManager
from strom.storage.producer_snapshot import CorruptSnapshotError, SnapshotEntry

DAY_MS = 86_400_000


class Clock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_log(path: Path, clock: Clock | None = None, **kwargs: object) -> PartitionLog:
    segment_bytes = int(kwargs.pop("segment_bytes", 600))  # type: ignore[call-overload]
    return PartitionLog(
        str(path / "t-0"),
        LogConfig(segment_bytes=segment_bytes),
        clock or Clock(),
        **kwargs,  # type: ignore[arg-type]
    )


def snapshots(log: PartitionLog) -> list[int]:
    return producer_snapshot.list_offsets(log.dir)


def produce(log: PartitionLog, pid: int, first_seq: int, batches: int, count: int = 2) -> int:
    """Append ``batches`` idempotent batches of ``count`` records; returns the next sequence."""
    seq = first_seq
    for _ in range(batches):
        log.append_as_leader(idempotent_batch(pid, 0, seq, count=count, timestamp=1_000_000), 0)
        seq += count
    return seq


# -- file format --------------------------------------------------------------------------------


def test_layout_is_kafkas() -> None:
    entry = SnapshotEntry(7, 2, 41, 1234, 3, 99, -1, -1)
    data = producer_snapshot.encode([entry])
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 1, 10 + 46)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == tuple(entry)
    assert producer_snapshot.decode(data) == [entry]


@given(
    st.lists(
        st.builds(
            SnapshotEntry,
            st.integers(0, 2**63 - 1),
            st.integers(-1, 2**15 - 1),
            st.integers(-1, 2**31 - 1),
            st.integers(-1, 2**63 - 1),
            st.integers(0, 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(-1, 2**31 - 1),
            st.integers(-1, 2**63 - 1),
        ),
        max_size=20,
    )
)
def test_round_trip(entries: list[SnapshotEntry]) -> None:
    assert producer_snapshot.decode(producer_snapshot.encode(entries)) == entries


@pytest.mark.parametrize("damage", ["flip", "truncate", "version", "short"])
def test_damage_is_detected(damage: str) -> None:
    data = bytearray(producer_snapshot.encode([SnapshotEntry(1, 0, 5, 10, 1, 7)] * 3))
    if damage == "flip":
        data[40] ^= 0x10
    elif damage == "truncate":
        del data[-5:]
    elif damage == "version":
        struct.pack_into(">h", data, 0, 2)
    else:
        del data[3:]
    with pytest.raises(CorruptSnapshotError):
        producer_snapshot.decode(bytes(data))


# -- written at roll and close ---------------------------------------------------------------------


def test_snapshot_at_each_roll_keeping_the_latest_two(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 40)
    rolls = [s.base_offset for s in log.segments[1:]]
    assert len(rolls) >= 3
    assert snapshots(log) == rolls[-2:]
    assert all(len(name) == 29 for name in os.listdir(log.dir) if name.endswith(".snapshot"))


def test_clean_close_snapshots_the_log_end_and_reopen_replays_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    seq = produce(log, 7, 0, 40)
    log.close()
    assert snapshots(log)[-1] == log.log_end_offset
    reopened = open_log(tmp_path, recovery_point=log.log_end_offset, clean_shutdown=True)
    assert reopened.replayed_batch_headers == 0
    last = idempotent_batch(7, 0, seq - 2, count=2, timestamp=1_000_000)
    dup = reopened.append_as_leader(last, 0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (78, 79)
    with pytest.raises(KafkaError) as err:  # the state is there: a gap is refused, not accepted
        reopened.append_as_leader(idempotent_batch(7, 0, seq + 1, timestamp=1_000_000), 0)
    assert err.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert not reopened.append_as_leader(idempotent_batch(7, 0, seq, timestamp=1_000_000), 0).duplicate


def test_unclean_open_replays_only_headers_after_the_roll_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    seq = produce(log, 7, 0, 40)
    rolled_at = snapshots(log)[-1]
    after = sum(1 for s in log.segments if s.base_offset >= rolled_at for _ in s.scan())
    assert 0 < after < 40
    # no close: a crash; the recovery-point checkpoint may lag, recovery re-validates the tail
    crashed = open_log(tmp_path, recovery_point=rolled_at)
    assert crashed.replayed_batch_headers == after
    for back in range(2, 2 * (after + 1), 2):  # every batch after the snapshot is still recognised
        retry = crashed.append_as_leader(idempotent_batch(7, 0, seq - back, count=2, timestamp=1_000_000), 0)
        assert retry.duplicate and retry.base_offset == seq - back
        if back >= 10:
            break


def test_snapshot_above_the_recovery_point_is_not_trusted(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 40)
    log.close()
    reopened = open_log(tmp_path, recovery_point=0, clean_shutdown=True)
    assert reopened.replayed_batch_headers == 40
    assert reopened.producer_state.producers[7].last_seq == 79


def test_corrupt_snapshot_falls_back_to_an_older_one_and_is_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 40)
    log.close()
    older, newest = snapshots(log)
    with open(producer_snapshot.path_for(log.dir, newest), "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff")
    reopened = open_log(tmp_path, recovery_point=newest, clean_shutdown=True)
    assert snapshots(reopened) == [older]
    assert 0 < reopened.replayed_batch_headers < 40
    assert reopened.producer_state.producers[7].last_seq == 79


def test_no_usable_snapshot_means_a_full_header_replay(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 40)
    log.close()
    for offset in snapshots(log):
        with open(producer_snapshot.path_for(log.dir, offset), "wb") as f:
            f.write(b"\x00\x01garbage")
    reopened = open_log(tmp_path, recovery_point=log.log_end_offset, clean_shutdown=True)
    assert snapshots(reopened) == []
    assert reopened.replayed_batch_headers == 40
    assert reopened.producer_state.producers[7].last_seq == 79


def test_snapshots_below_the_log_start_offset_are_deleted(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 40)
    log.high_watermark = log.log_end_offset
    newest = snapshots(log)[-1]
    log.delete_records_before(newest + 1)
    assert snapshots(log) == []


def test_truncation_deletes_snapshots_above_the_new_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 40)
    older, newest = snapshots(log)
    log.truncate_to(newest - 1)
    assert snapshots(log) == [older]
    assert log.producer_state.producers[7].last_offset == log.log_end_offset - 1
    produce(log, 7, log.log_end_offset, 1)  # continues from the state at the truncation point


def test_a_failed_snapshot_write_does_not_fail_the_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 7, 0, 3)
    os.mkdir(producer_snapshot.path_for(log.dir, 6))  # the rename into place fails (IsADirectoryError)
    segment = log.roll()
    assert segment.base_offset == 6 and len(log.segments) == 2
    assert not [n for n in os.listdir(log.dir) if n.endswith(".tmp")]
    produce(log, 7, 6, 1)


# -- expiration -------------------------------------------------------------------------------------


def test_producers_expire_after_producer_id_expiration_ms(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    log = open_log(tmp_path, clock, producer_id_expiration_ms=DAY_MS)
    produce(log, 7, 0, 1)
    produce(log, 8, 0, 1)
    log.append_as_leader(idempotent_batch(8, 0, 2, timestamp=1_000_500), 0)
    assert log.producer_state.remove_expired_producers(1_000_000 + DAY_MS - 1) == 0
    assert log.producer_state.remove_expired_producers(1_000_000 + DAY_MS) == 1  # >=, as Kafka
    assert set(log.producer_state.producers) == {8}
    # an expired producer is a new one: any sequence is accepted
    assert not log.append_as_leader(idempotent_batch(7, 0, 500, timestamp=1_000_000), 0).duplicate


def test_expired_producers_are_not_loaded_from_a_snapshot(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    log = open_log(tmp_path, clock)
    produce(log, 7, 0, 3)
    log.close()
    clock.now_ms += DAY_MS
    reopened = open_log(tmp_path, clock, recovery_point=log.log_end_offset, clean_shutdown=True)
    assert reopened.producer_state.producers == {}


def test_log_manager_applies_expiration_to_every_log(tmp_path: Path) -> None:
    clock = Clock(1_000_000)
    manager = LogManager([str(tmp_path)], LogConfig(), clock, producer_id_expiration_ms=1_000)
    for p in range(3):
        manager.get_or_create_log("t", p).append_as_leader(idempotent_batch(p, 0, 0, timestamp=999_500), 0)
    manager.get_or_create_log("t", 0).append_as_leader(make_batch(), 0)
    assert manager.remove_expired_producers(1_000_400) == 0
    assert manager.remove_expired_producers(1_000_500) == 3
    manager.shutdown()
