"""The partition side of transactions: control markers, producer state, LSO, `.txnindex`, read_committed."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import make_batch

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import CONTROL_BIT, TRANSACTIONAL_BIT, iter_headers
from strom.protocol.records.builder import build_batch, decode_batches
from strom.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    build_marker_batch,
    parse_marker,
    read_marker,
)
from strom.protocol.records.record import RecordDecodeError
from strom.storage import producer_snapshot
from strom.storage.cleaner import LogCleaner
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.log_manager import LogManager
from strom.storage.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode, encode

COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT


class Clock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def open_log(path: Path, segment_bytes: int = 100_000, **kwargs: object) -> PartitionLog:
    return PartitionLog(str(path / "t-0"), LogConfig(segment_bytes=segment_bytes), Clock(), **kwargs)  # type: ignore[arg-type]


class Producer:
    """A transactional producer's batches for one partition (sequence numbers kept here)."""

    def __init__(self, log: PartitionLog, pid: int, epoch: int = 0) -> None:
        self.log, self.pid, self.epoch, self.seq = log, pid, epoch, 0

    def send(self, count: int = 2, transactional: bool = True) -> int:
        batch = make_batch(
            count=count,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            attributes=TRANSACTIONAL_BIT if transactional else 0,
        )
        info = self.log.append_as_leader(batch, 0)
        self.seq += count
        return info.base_offset

    def end(self, control: ControlType, coordinator_epoch: int = 0, epoch: int | None = None) -> int:
        return self.log.append_marker(
            self.pid, self.epoch if epoch is None else epoch, control, coordinator_epoch, 0
        ).base_offset


def advance_hw(log: PartitionLog) -> None:
    log.high_watermark = log.log_end_offset


# -- control records ----------------------------------------------------------------------------


def test_marker_batch_layout() -> None:
    batch = build_marker_batch(7, 3, EndTxnMarker(COMMIT, 5), 1234)
    ((_, header),) = list(iter_headers(batch))
    assert header.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT) == TRANSACTIONAL_BIT | CONTROL_BIT
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert header.records_count == 1 and header.compression == 0
    (decoded,) = decode_batches(batch)
    record = decoded.records[0]
    assert record.key == struct.pack(">hh", 0, 1)  # 4 bytes: librdkafka refuses any other size
    assert record.value == struct.pack(">hi", 0, 5)
    assert read_marker(batch, header) == EndTxnMarker(COMMIT, 5)
    abort = build_marker_batch(7, 3, EndTxnMarker(ABORT, 9), 1234)
    assert read_marker(abort, next(iter_headers(abort))[1]) == EndTxnMarker(ABORT, 9)


def test_other_control_types_and_bad_markers() -> None:
    assert parse_marker(struct.pack(">hh", 0, 2), b"") is None  # LEADER_CHANGE: not a marker
    with pytest.raises(RecordDecodeError):
        parse_marker(b"\x00\x00\x01", struct.pack(">hi", 0, 1))
    with pytest.raises(RecordDecodeError):
        parse_marker(struct.pack(">hh", 0, 0), b"\x00")


# -- .txnindex file -----------------------------------------------------------------------------


def test_txnindex_layout_is_kafkas() -> None:
    entry = AbortedTxn(producer_id=5, first_offset=10, last_offset=20, last_stable_offset=21)
    data = encode([entry])
    assert len(data) == ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 5, 10, 20, 21)
    assert decode(data + data[:7]) == [entry]  # a torn trailing entry is ignored


def test_txnindex_append_truncate_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path, 0)
    assert not os.path.exists(path)  # created with its first entry
    entries = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 3, 8, 9), AbortedTxn(1, 9, 12, 13)]
    for entry in entries:
        index.append(entry)
    with pytest.raises(ValueError, match="does not follow"):
        index.append(AbortedTxn(3, 1, 12, 13))
    index.flush()
    index.close()
    assert TransactionIndex(path, 0).entries == entries
    index = TransactionIndex(path, 0)
    index.truncate_to(8)
    assert index.entries == entries[:1]
    index.close()
    assert os.path.getsize(path) == ENTRY_SIZE
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)  # torn write
    assert TransactionIndex(path, 0).entries == entries[:1]
    assert os.path.getsize(path) == ENTRY_SIZE


def test_txnindex_out_of_order_file_needs_rebuild(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000100.txnindex")
    with open(path, "wb") as f:
        f.write(encode([AbortedTxn(1, 100, 150, 151), AbortedTxn(1, 100, 120, 121)]))
    index = TransactionIndex(path, 100)
    assert index.needs_rebuild and index.entries == []
    below_base = str(tmp_path / "00000000000000000200.txnindex")
    with open(below_base, "wb") as f:
        f.write(encode([AbortedTxn(1, 100, 150, 151)]))
    assert TransactionIndex(below_base, 200).needs_rebuild


def test_txnindex_collect_stops_at_complete_entry(tmp_path: Path) -> None:
    index = TransactionIndex(str(tmp_path / "x.txnindex"), 0)
    for entry in [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 9, 10), AbortedTxn(3, 11, 12, 30)]:
        index.append(entry)
    assert index.collect(5, 10) == ([AbortedTxn(2, 6, 9, 10)], True)
    assert index.collect(0, 100) == (index.entries, False)


# -- producer state, LSO and markers ------------------------------------------------------------


def test_open_transaction_pins_lso_until_commit(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a = Producer(log, 1)
    log.append_as_leader(make_batch(count=3), 0)  # 0..2, plain
    assert a.send() == 3
    advance_hw(log)
    assert (log.high_watermark, log.last_stable_offset) == (5, 3)
    records, aborted = log.read_committed(0, 1 << 20)
    assert [h.last_offset for _, h in iter_headers(records.read_bytes())] == [2]
    assert aborted == []
    assert a.end(COMMIT) == 5
    assert log.last_stable_offset == 3  # its marker is not below the high watermark yet
    advance_hw(log)
    assert log.last_stable_offset == log.high_watermark == 6
    records, aborted = log.read_committed(0, 1 << 20)
    assert [h.last_offset for _, h in iter_headers(records.read_bytes())] == [2, 4, 5]
    assert aborted == []


def test_abort_writes_index_entry_and_read_committed_lists_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a, b = Producer(log, 1), Producer(log, 2)
    a.send()  # 0..1
    b.send()  # 2..3
    a.send()  # 4..5
    assert a.end(ABORT) == 6
    # B is still open: the entry's last stable offset is B's first offset
    assert log.active_segment.txn_index.entries == [AbortedTxn(1, 0, 6, 2)]
    assert b.end(COMMIT) == 7
    advance_hw(log)
    assert log.last_stable_offset == 8
    _, aborted = log.read_committed(0, 1 << 20)
    assert aborted == [AbortedTxn(1, 0, 6, 2)]
    _, aborted = log.read_committed(7, 1 << 20)
    assert aborted == []  # the aborted transaction ended before the fetch offset
    assert os.path.getsize(log.active_segment.txn_index.path) == ENTRY_SIZE


def test_txn_fencing_errors(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a = Producer(log, 1, epoch=2)
    a.send()
    with pytest.raises(KafkaError) as exc:
        a.send(transactional=False)
    assert exc.value.code == ErrorCode.INVALID_TXN_STATE
    with pytest.raises(KafkaError) as exc:
        a.end(COMMIT, epoch=1)
    assert exc.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    a.end(ABORT, coordinator_epoch=4, epoch=3)  # a coordinator's fencing abort raises the epoch
    with pytest.raises(KafkaError) as exc:
        a.send()  # the zombie at epoch 2
    assert exc.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as exc:
        a.end(ABORT, coordinator_epoch=3, epoch=3)
    assert exc.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    end = log.log_end_offset
    assert log.append_marker(1, 3, ABORT, 4, 0).base_offset == end  # a retried marker: empty txn
    assert log.active_segment.txn_index.entries[-1] == AbortedTxn(1, end, end, end + 1)


def test_unreplicated_marker_keeps_lso_until_hw_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a = Producer(log, 1)
    a.send()
    a.end(COMMIT)
    log.high_watermark = 1
    assert log.last_stable_offset == 0
    log.high_watermark = 2
    assert log.last_stable_offset == 0  # the marker at 2 is not below the HW
    log.high_watermark = 3
    assert log.last_stable_offset == 3


def test_open_transaction_survives_restart_and_expiry(tmp_path: Path) -> None:
    log = open_log(tmp_path, producer_id_expiration_ms=1000)
    a = Producer(log, 1)
    log.append_as_leader(make_batch(count=1), 0)
    a.send()
    log.producer_state.remove_expired_producers(10**12)  # an open transaction never expires
    assert 1 in log.producer_state.producers
    log.close()
    rows = producer_snapshot.read(log.dir, 3)
    assert rows[0].current_txn_first_offset == 1
    log = open_log(tmp_path, recovery_point=3, high_watermark=3, clean_shutdown=True)
    assert log.replayed_batch_headers == 0
    assert log.last_stable_offset == 1
    a.log = log
    a.end(ABORT)
    assert log.active_segment.txn_index.entries == [AbortedTxn(1, 1, 3, 4)]


def test_recovery_rebuilds_txnindex_and_lso(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    a, b = Producer(log, 1), Producer(log, 2)
    for _ in range(4):
        a.send()
        a.end(ABORT)
        b.send(count=1)
        b.end(COMMIT)
    b.send()  # open
    advance_hw(log)
    expected = [e for s in log.segments for e in s.txn_index.entries]
    lso, hw = log.last_stable_offset, log.high_watermark
    assert len(log.segments) > 2 and len(expected) == 4
    for name in os.listdir(log.dir):  # an unclean stop losing every snapshot and index
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(os.path.join(log.dir, name))
    log = open_log(tmp_path, high_watermark=hw)
    assert [e for s in log.segments for e in s.txn_index.entries] == expected
    assert log.last_stable_offset == lso
    _, aborted = log.read_committed(0, 1 << 20)
    assert aborted == expected


def test_truncation_reopens_the_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    a = Producer(log, 1)
    a.send()
    marker = a.end(ABORT)
    advance_hw(log)
    log.truncate_to(marker)
    assert log.active_segment.txn_index.entries == []
    assert log.last_stable_offset == 0


def test_follower_replays_markers(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    a = Producer(leader, 1)
    a.send()
    a.end(ABORT)
    a.send()
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.active_segment.txn_index.entries == leader.active_segment.txn_index.entries
    advance_hw(follower)
    assert follower.last_stable_offset == 3


def test_marker_ending_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    a = Producer(log, 1)
    a.send(count=3)
    a.end(ABORT)
    log.roll()
    a.send(count=1)
    a.end(COMMIT)
    advance_hw(log)
    assert log.segments[0].txn_index.entries == [AbortedTxn(1, 0, 3, 4)]
    records, aborted = log.read_committed(0, 1)  # one batch only: the upper bound is the next batch
    assert [h.base_offset for _, h in iter_headers(records.read_bytes())] == [0]
    assert aborted == [AbortedTxn(1, 0, 3, 4)]
    _, aborted = log.read_committed(4, 1 << 20)
    assert aborted == []


# -- property: what a read_committed consumer sees ----------------------------------------------


def committed_view(data: bytes, aborted: list[AbortedTxn]) -> list[int]:
    """Offsets of data records a read_committed consumer keeps (the Java consumer's filter)."""
    pending = sorted(aborted, key=lambda e: e.first_offset)
    aborting: set[int] = set()
    kept = []
    for _, header in iter_headers(data):
        while pending and pending[0].first_offset <= header.last_offset:
            aborting.add(pending.pop(0).producer_id)
        if header.is_control:
            if read_marker(data[_ : _ + header.size], header) == EndTxnMarker(ABORT, 0):
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        kept += range(header.base_offset, header.last_offset + 1)
    return kept


OPS = st.lists(
    st.tuples(
        st.sampled_from(["send", "commit", "abort", "plain", "roll", "hw", "reopen"]), st.integers(1, 3)
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_read_committed_sees_exactly_the_committed_records(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    path = tmp_path_factory.mktemp("log")
    log = open_log(path, segment_bytes=500)
    producers = {pid: Producer(log, pid) for pid in (1, 2, 3)}
    open_txn: dict[int, list[int]] = {}
    committed: set[int] = set()
    sent: set[int] = set()
    for op, pid in ops:
        p = producers[pid]
        if op == "send":
            first = p.send(count=2)
            open_txn.setdefault(pid, []).extend([first, first + 1])
            sent.update((first, first + 1))
        elif op in ("commit", "abort") and pid in open_txn:
            p.end(COMMIT if op == "commit" else ABORT)
            offsets = open_txn.pop(pid)
            if op == "commit":
                committed.update(offsets)
        elif op == "plain":
            committed.add(log.append_as_leader(make_batch(count=1), 0).base_offset)
        elif op == "roll":
            log.roll()
        elif op == "hw":
            advance_hw(log)
        elif op == "reopen":
            hw = log.high_watermark
            log.close()
            log = open_log(path, segment_bytes=500, high_watermark=hw, recovery_point=log.log_end_offset)
            for q in producers.values():
                q.log = log
    advance_hw(log)
    first_open = min((offs[0] for offs in open_txn.values()), default=log.high_watermark)
    assert log.last_stable_offset == first_open
    records, aborted = log.read_committed(0, 1 << 30)
    assert committed_view(records.read_bytes(), aborted) == sorted(o for o in committed if o < first_open)
    uncommitted = log.read_records(0, 1 << 30, log.high_watermark).read_bytes()
    data = [h for _, h in iter_headers(uncommitted) if not h.is_control]
    assert {o for h in data for o in range(h.base_offset, h.last_offset + 1)} == sent | committed


# -- compaction ---------------------------------------------------------------------------------


def keyed_txn_batch(p: Producer, key: bytes, value: bytes) -> int:
    batch = build_batch(
        [(key, value, (), 1_000)],
        producer_id=p.pid,
        producer_epoch=p.epoch,
        base_sequence=p.seq,
        is_transactional=True,
    )
    p.seq += 1
    return p.log.append_as_leader(batch, 0).base_offset


def test_compaction_keeps_committed_over_aborted_and_stops_at_lso(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=100_000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    manager = LogManager([str(tmp_path)], config, Clock())
    log = manager.get_or_create_log("t", 0)
    a, b = Producer(log, 1), Producer(log, 2)
    keyed_txn_batch(a, b"k", b"committed")  # 0
    a.end(COMMIT)
    keyed_txn_batch(a, b"k", b"aborted")  # 2: must not supersede offset 0
    a.end(ABORT)
    log.roll()
    keyed_txn_batch(b, b"j", b"one")  # 4
    b.end(COMMIT)
    log.roll()
    keyed_txn_batch(b, b"j", b"open")  # 6: open, so the segment holding it is not cleaned
    log.roll()
    advance_hw(log)
    assert log.last_stable_offset == 6
    entries = [e for s in log.segments for e in s.txn_index.entries]
    stats = LogCleaner(manager, Clock()).clean_once()
    assert stats is not None and stats.end_offset == 6
    assert [e for s in log.segments for e in s.txn_index.entries] == entries == [AbortedTxn(1, 2, 3, 4)]
    b.end(COMMIT)
    advance_hw(log)
    records, aborted = log.read_committed(0, 1 << 20)
    kept = [
        r.value
        for batch in decode_batches(records.read_bytes())
        if not batch.is_control
        and not any(
            e.producer_id == batch.producer_id and e.first_offset <= batch.base_offset <= e.last_offset
            for e in aborted
        )
        for r in batch.records
    ]
    assert kept == [b"committed", b"one", b"open"]
    manager.shutdown()
    reopened = LogManager([str(tmp_path)], config, Clock()).get_or_create_log("t", 0)
    assert [e for s in reopened.segments for e in s.txn_index.entries] == entries
