"""Compaction and retention of transactional data: aborted records, markers, `.txnindex`, producer state.

Pure decisions of transaction_cleaning.py first, then the cleaner on real segment files (a
`LogManager` on a manual clock), then a property: whatever sequence of transactions, cleans, reopens
and clock moves, a read_committed reader sees the latest committed value of every key and nothing of
an aborted transaction.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cleaner_support import COMPACT, Fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import DELETE_HORIZON_BIT, iter_headers, read_header
from strom.protocol.records.builder import build_batch, decode_batches, encode_batch
from strom.protocol.records.control import ControlType, EndTxnMarker, build_marker_batch, read_marker
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.transaction_cleaning import (
    CleanedTransactions,
    ProducerLast,
    clean_control_batch,
    is_producer_last_batch,
)
from strom.storage.transaction_index import AbortedTxn

COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT


def data_header(base_offset: int, pid: int, count: int = 1, transactional: bool = True) -> bytes:
    return build_batch(
        [(b"k", b"v", (), 1)] * count,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=transactional,
    )


def marker(offset: int, pid: int, control: ControlType, epoch: int = 0) -> bytes:
    return build_marker_batch(pid, epoch, EndTxnMarker(control, 0), 1, base_offset=offset)


# -- pure decisions --------------------------------------------------------------------------------


def test_aborted_data_goes_and_markers_stay_while_their_data_is_seen() -> None:
    aborted = AbortedTxn(1, 2, 5, 6)
    txns = CleanedTransactions([aborted], start_offset=0)
    assert not txns.on_data_batch(read_header(data_header(0, 1)))  # committed transaction of 1
    assert not txns.on_data_batch(read_header(data_header(1, 9, transactional=False)))
    assert txns.on_marker(read_header(marker(2 - 1, 1, COMMIT)), EndTxnMarker(COMMIT, 0)) == (False, None)
    assert txns.on_data_batch(read_header(data_header(2, 1, count=2)))  # aborted
    assert not txns.on_data_batch(read_header(data_header(4, 2)))  # another producer's, committed
    assert txns.on_marker(read_header(marker(5, 1, ABORT)), EndTxnMarker(ABORT, 0)) == (False, aborted)
    # producer 2's commit after data seen stays; a second commit with no data is discardable
    assert txns.on_marker(read_header(marker(6, 2, COMMIT)), EndTxnMarker(COMMIT, 0)) == (False, None)
    assert txns.on_marker(read_header(marker(7, 2, COMMIT)), EndTxnMarker(COMMIT, 0)) == (True, None)


def test_an_abort_whose_data_is_gone_is_discardable_and_drops_its_entry() -> None:
    txns = CleanedTransactions([AbortedTxn(1, 2, 5, 6)], start_offset=0)
    assert txns.on_marker(read_header(marker(5, 1, ABORT)), EndTxnMarker(ABORT, 0)) == (True, None)


def test_entries_whose_markers_precede_the_walk_are_left_out() -> None:
    """The offset map's walk starts at the first dirty offset: an earlier aborted transaction of the
    producer must not make its later committed data look aborted."""
    txns = CleanedTransactions([AbortedTxn(1, 0, 3, 4)], start_offset=10)
    assert not txns.on_data_batch(read_header(data_header(10, 1)))


def test_producer_last_batch_is_its_last_data_batch_or_else_its_marker() -> None:
    producers = {1: ProducerLast(4, 0), 2: ProducerLast(-1, 3)}
    assert is_producer_last_batch(read_header(data_header(4, 1)), producers)
    assert not is_producer_last_batch(read_header(data_header(3, 1)), producers)
    assert not is_producer_last_batch(read_header(marker(5, 1, COMMIT)), producers)
    assert is_producer_last_batch(read_header(marker(9, 2, ABORT, epoch=3)), producers)
    assert not is_producer_last_batch(read_header(marker(8, 2, ABORT, epoch=2)), producers)
    assert not is_producer_last_batch(read_header(data_header(4, 7)), producers)  # unknown producer


def test_control_batch_gets_a_horizon_then_goes() -> None:
    batch = marker(5, 1, COMMIT)
    header = read_header(batch)
    kept = clean_control_batch(
        batch, header, discardable=False, now_ms=100, delete_retention_ms=50, producer_last_batch=False
    )
    assert kept == (batch, None, 0)
    stamped = clean_control_batch(
        batch, header, discardable=True, now_ms=100, delete_retention_ms=50, producer_last_batch=False
    )
    assert stamped.delete_horizon_ms == 150 and stamped.data is not None
    new_header = read_header(stamped.data)
    assert new_header.attributes & DELETE_HORIZON_BIT and new_header.is_control
    assert (new_header.base_offset, new_header.producer_id) == (5, 1)
    assert read_marker(stamped.data, new_header) == EndTxnMarker(COMMIT, 0)

    def again(now_ms: int, last: bool) -> tuple[bytes | None, int | None, int]:
        data, horizon, removed = clean_control_batch(
            stamped.data or b"",
            new_header,
            discardable=True,
            now_ms=now_ms,
            delete_retention_ms=50,
            producer_last_batch=last,
        )
        return data, horizon, removed

    assert again(149, False) == (stamped.data, 150, 0)
    assert again(150, False) == (None, None, 1)
    assert again(150, True) == (stamped.data, None, 0)  # its producer's last: kept whole
    # An empty control batch (Kafka's cleaner leaves them) goes unless it is its producer's last.
    empty = encode_batch(
        [], base_offset=5, last_offset_delta=0, producer_id=1, is_transactional=True, is_control=True
    )
    empty_header = read_header(empty)
    assert empty_header.is_control and empty_header.records_count == 0
    assert clean_control_batch(
        empty, empty_header, discardable=True, now_ms=0, delete_retention_ms=0, producer_last_batch=False
    ) == (None, None, 0)
    assert clean_control_batch(
        empty, empty_header, discardable=True, now_ms=0, delete_retention_ms=0, producer_last_batch=True
    ) == (empty, None, 0)


# -- the cleaner on real files ---------------------------------------------------------------------


class Txn:
    """A transactional producer writing keyed batches into a `Fixture`'s log."""

    def __init__(self, fx: Fixture, pid: int, epoch: int = 0) -> None:
        self.fx, self.pid, self.epoch, self.seq = fx, pid, epoch, 0

    def send(self, *records: tuple[bytes, bytes]) -> int:
        first = self.fx.append(
            list(records),
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=True,
        )
        self.seq += len(records)
        return first

    def end(self, control: ControlType, epoch: int | None = None) -> int:
        log = self.fx.log
        offset = log.append_marker(
            self.pid, self.epoch if epoch is None else epoch, control, 0, 0
        ).base_offset
        log.high_watermark = log.log_end_offset
        return offset


def committed_records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer keeps (aborted ranges skipped, control batches dropped)."""
    records, aborted = log.read_committed(log.log_start_offset, 1 << 30)
    pending = sorted(aborted, key=lambda e: e.first_offset)
    aborting: set[int] = set()
    out = []
    for batch in decode_batches(records.read_bytes()):
        while pending and pending[0].first_offset <= batch.base_offset + batch.last_offset_delta:
            aborting.add(pending.pop(0).producer_id)
        if batch.is_control:
            if batch.records and read_marker_of(batch.records[0].key) == ABORT:
                aborting.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in aborting:
            continue
        out += [(r.offset, r.key, r.value) for r in batch.records]
    return out


def read_marker_of(key: bytes | None) -> int:
    assert key is not None
    return int.from_bytes(key[2:4], "big")


def all_batches(log: PartitionLog) -> list[tuple[int, bool, int, bool]]:
    """(base offset, is control, record count, has a delete horizon) of every stored batch."""
    data = log.read(log.log_start_offset, 1 << 30)
    return [
        (h.base_offset, h.is_control, h.records_count, bool(h.attributes & DELETE_HORIZON_BIT))
        for _, h in iter_headers(data)
    ]


def txn_entries(log: PartitionLog) -> list[AbortedTxn]:
    return [e for s in log.segments for e in s.txn_index.entries]


def dirty_round(fx: Fixture, n: int) -> None:
    """Some fresh plain data in a closed segment, so that the cleaner has a dirty section to clean."""
    fx.append([(b"plain", str(n).encode())])
    fx.roll()


def test_aborted_records_go_and_markers_follow_their_data(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    a, b = Txn(fx, 1), Txn(fx, 2)
    a.send((b"k", b"c1"))  # 0
    a.end(COMMIT)  # 1
    a.send((b"k", b"ab"), (b"j", b"ab"))  # 2-3
    a.end(ABORT)  # 4
    b.send((b"x", b"b1"))  # 5
    b.end(COMMIT)  # 6
    a.send((b"k", b"c2"))  # 7: a's last data batch
    a.end(COMMIT)  # 8
    dirty_round(fx, 0)
    before = committed_records(fx.log)
    assert [v for _, _, v in before] == [b"c1", b"b1", b"c2", b"0"]
    assert txn_entries(fx.log) == [AbortedTxn(1, 2, 4, 5)]

    assert fx.cleaner.clean_once() is not None
    # k@0 is superseded and the aborted batch is gone; every marker stays: this clean met their data
    assert [(o, c) for o, c, _, _ in all_batches(fx.log)] == [
        (1, True),
        (4, True),
        (5, False),
        (6, True),
        (7, False),
        (8, True),
        (9, False),
    ]
    assert committed_records(fx.log) == before[1:]
    assert txn_entries(fx.log) == [AbortedTxn(1, 2, 4, 5)]

    dirty_round(fx, 1)
    fx.cleaner.clean_once()
    # no data of the transactions ended at 1 and 4 is left: their markers get a delete horizon and the
    # abort's `.txnindex` entry goes (nothing left to hide)
    horizons = {o: h for o, c, _, h in all_batches(fx.log) if c}
    assert horizons == {1: True, 4: True, 6: False, 8: False}
    assert txn_entries(fx.log) == []
    assert not [n for n in os.listdir(fx.log.dir) if n.endswith(".txnindex")]

    fx.clock.now_ms += COMPACT.delete_retention_ms
    assert fx.cleaner.clean_once() is not None  # the expired horizons alone make the log cleanable
    assert [o for o, c, _, _ in all_batches(fx.log) if c] == [6, 8]
    assert [v for _, _, v in committed_records(fx.log)] == [b"b1", b"c2", b"1"]

    fx.reopen(clean=False)  # the producer state and LSO come back the same from the cleaned log
    assert fx.log.last_stable_offset == fx.log.high_watermark == fx.log.log_end_offset
    a.fx = b.fx = fx
    a.send((b"k", b"c3"))  # sequences continue
    a.end(COMMIT)
    assert [v for _, _, v in committed_records(fx.log)][-1] == b"c3"


def test_a_fenced_producers_last_marker_stays_and_keeps_its_epoch(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    zombie = Txn(fx, 3)
    zombie.send((b"f", b"zombie"))  # 0
    zombie.end(ABORT, epoch=1)  # 1: the coordinator's fencing abort raises the epoch
    for n in range(2):
        dirty_round(fx, n)
        fx.cleaner.clean_once()
    fx.clock.now_ms += COMPACT.delete_retention_ms
    dirty_round(fx, 2)
    fx.cleaner.clean_once()
    assert all_batches(fx.log)[0] == (1, True, 1, True)  # past its horizon, kept: it holds epoch 1
    for name in os.listdir(fx.log.dir):  # lose every snapshot: the state comes from the batches
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(fx.log.dir, name))
    fx.reopen(clean=False)
    assert fx.log.producer_state.producers[3].producer_epoch == 1
    zombie.fx = fx
    with pytest.raises(KafkaError) as info:
        zombie.send((b"f", b"late"))
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert committed_records(fx.log)[-1][2] == b"2"


def test_an_empty_control_batch_replicated_or_replayed_raises_the_epoch(tmp_path: Path) -> None:
    """Kafka's cleaner leaves a producer's last marker as an empty control batch; a follower copying
    such a log, and a replay of it, take the producer's epoch from it and nothing else."""
    fx = Fixture(str(tmp_path))
    empty = encode_batch(
        [],
        base_offset=0,
        last_offset_delta=0,
        producer_id=7,
        producer_epoch=3,
        is_transactional=True,
        is_control=True,
    )
    fx.log.append_as_follower(empty)
    fx.log.high_watermark = fx.log.log_end_offset
    assert fx.log.producer_state.producers[7].producer_epoch == 3
    assert fx.log.last_stable_offset == 1 and txn_entries(fx.log) == []
    fx.manager.shutdown()
    for name in os.listdir(fx.log.dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(fx.log.dir, name))
    fx.open()
    assert fx.log.producer_state.producers[7].producer_epoch == 3


def test_cleaning_stops_at_an_open_transaction_and_a_restart_keeps_the_lso(tmp_path: Path) -> None:
    fx = Fixture(str(tmp_path))
    a, b = Txn(fx, 1), Txn(fx, 2)
    a.send((b"k", b"old"))  # 0
    a.end(COMMIT)  # 1
    fx.roll()
    b.send((b"k", b"open"))  # 2: open
    fx.roll()
    a.send((b"k", b"new"))  # 3
    a.end(ABORT)  # 4
    fx.roll()
    assert fx.log.last_stable_offset == 2
    fx.cleaner.clean_once()
    assert [o for o, *_ in all_batches(fx.log)][:2] == [0, 1]  # nothing at or past the LSO cleaned
    fx.reopen(clean=False)
    assert fx.log.last_stable_offset == 2
    for name in os.listdir(fx.log.dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(fx.log.dir, name))
    fx.reopen(clean=False)
    assert fx.log.last_stable_offset == 2
    b.fx = fx
    b.end(COMMIT)
    fx.cleaner.clean_once()
    assert [v for _, _, v in committed_records(fx.log)] == [b"open"]  # the abort never superseded it


def test_a_stale_snapshots_open_transaction_whose_data_was_cleaned_does_not_pin_the_lso(
    tmp_path: Path,
) -> None:
    """A snapshot taken while a transaction was open, used after its data and marker were cleaned
    (an unclean stop whose recovery point predates the clean): the transaction had ended."""
    fx = Fixture(str(tmp_path))
    a = Txn(fx, 1)
    a.send((b"k", b"v1"))  # 0
    fx.roll()  # snapshot at 1: producer 1 open from 0
    stale = (tmp_path / "t-0" / f"{1:020d}.snapshot").read_bytes()
    a.end(COMMIT)  # 1
    fx.clock.now_ms += 86_400_000  # producer 1 expires (producer.id.expiration.ms)
    assert fx.log.producer_state.remove_expired_producers(fx.clock.now_ms) == 1
    fx.append([(b"k", b"v2")])  # 2
    for n in range(2):  # k@0 goes; then the marker, no data left, gets its horizon
        dirty_round(fx, n)
        fx.cleaner.clean_once()
    fx.clock.now_ms += COMPACT.delete_retention_ms
    dirty_round(fx, 2)
    fx.cleaner.clean_once()
    assert [o for o, c, _, _ in all_batches(fx.log) if c] == []  # the marker is gone too
    fx.manager.shutdown()
    for name in os.listdir(fx.log.dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(fx.log.dir, name))
    (tmp_path / "t-0" / f"{1:020d}.snapshot").write_bytes(stale)
    fx.open()
    assert fx.log.last_stable_offset == fx.log.high_watermark == fx.log.log_end_offset
    assert fx.log.producer_state.ongoing == {}


def test_retention_deletes_txnindex_files_and_keeps_lso_and_aborted_reads(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=100_000, retention_bytes=1)
    fx = Fixture(str(tmp_path), config)
    a, b = Txn(fx, 1), Txn(fx, 2)
    a.send((b"k", b"a1"))  # 0
    a.end(ABORT)  # 1
    b.send((b"k", b"open"))  # 2: stays open across the deletion
    fx.roll()
    a.send((b"k", b"a2"))  # 3
    a.end(ABORT)  # 4
    fx.roll()
    a.send((b"k", b"c"))  # 5
    a.end(COMMIT)  # 6
    first_index = fx.log.segments[0].txn_index.path
    assert os.path.exists(first_index) and fx.log.last_stable_offset == 2
    assert fx.log.apply_retention(fx.clock.now_ms) == 2  # the active segment stays
    assert not os.path.exists(first_index)
    assert fx.log.log_start_offset == 5
    assert fx.log.last_stable_offset == 5  # the open transaction's start is gone: the log start
    b.end(COMMIT)
    assert fx.log.last_stable_offset == fx.log.log_end_offset == 8
    assert [v for _, _, v in committed_records(fx.log)] == [b"c"]
    fx.reopen(clean=False)
    assert fx.log.last_stable_offset == 8 and txn_entries(fx.log) == []


# -- property --------------------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["send", "send", "commit", "abort", "plain", "roll", "clean", "later", "reopen"]),
        st.integers(1, 3),
        st.sampled_from([b"a", b"b", b"c", b"d"]),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_read_committed_keeps_the_latest_committed_value_of_every_key(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, bytes]]
) -> None:
    fx = Fixture(str(tmp_path_factory.mktemp("txc")))
    producers = {pid: Txn(fx, pid) for pid in (1, 2, 3)}
    open_txn: dict[int, list[tuple[int, bytes, bytes]]] = {}
    committed: list[tuple[int, bytes, bytes]] = []
    for counter, (op, pid, key) in enumerate(ops):
        value = f"{op}-{counter}".encode()
        p = producers[pid]
        if op == "send":
            open_txn.setdefault(pid, []).append((p.send((key, value)), key, value))
        elif op in ("commit", "abort") and pid in open_txn:
            p.end(COMMIT if op == "commit" else ABORT)
            records = open_txn.pop(pid)
            if op == "commit":
                committed += records
        elif op == "plain":
            committed.append((fx.append([(key, value)]), key, value))
        elif op == "roll":
            fx.roll()
        elif op == "clean":
            fx.cleaner.clean_once()
        elif op == "later":
            fx.clock.now_ms += COMPACT.delete_retention_ms
        elif op == "reopen":
            lso = fx.log.last_stable_offset
            fx.reopen(clean=pid != 1)
            assert fx.log.last_stable_offset == lso
            for q in producers.values():
                q.fx = fx
    for pid in list(open_txn):
        producers[pid].end(COMMIT)
        committed += open_txn.pop(pid)
    fx.roll()
    fx.cleaner.clean_once()
    seen = committed_records(fx.log)
    by_offset = {o: (o, k, v) for o, k, v in committed}
    assert all(by_offset.get(o) == (o, k, v) for o, k, v in seen), "a record that was never committed"
    latest = {k: (o, k, v) for o, k, v in sorted(committed)}
    assert {k: r for r in seen for k in [r[1]]} == latest
