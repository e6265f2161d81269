"""The fault suite's checker (strom.testing.fault_checker): each anomaly is counted, and only it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.testing.fault_checker import UNKNOWN_OFFSET, Record, check, decode_payload, encode_payload


def rec(offset: int, writer: str, seq: int, partition: int = 0, topic: str = "t") -> Record:
    return Record(topic, partition, offset, encode_payload(writer, seq, 24))


def test_payload_round_trip_and_padding() -> None:
    payload = encode_payload("w-1.a_b", 42, 100)
    assert len(payload) == 100
    assert decode_payload(payload) == ("w-1.a_b", 42)
    assert encode_payload("w", 7) == b"w:7:"
    with pytest.raises(ValueError):
        encode_payload("bad:writer", 1)
    with pytest.raises(ValueError):
        decode_payload(b"garbage")


def test_clean_run() -> None:
    acked = [rec(i, "w", i) for i in range(10)]
    # An unacknowledged record that made it anyway (a timed-out request that was committed) is fine.
    read = [*acked, rec(10, "w", 10)]
    report = check(acked, read)
    assert report.ok, report.summary()
    assert (report.acknowledged, report.read) == (10, 11)


def test_lost() -> None:
    acked = [rec(i, "w", i) for i in range(5)]
    report = check(acked, acked[:3])
    assert (report.lost, report.duplicated, report.moved, report.reordered) == (2, 0, 0, 0)
    assert "('w', 3)" in report.summary()


def test_duplicated_including_unacknowledged() -> None:
    acked = [rec(0, "w", 0), rec(1, "w", 1)]
    read = [rec(0, "w", 0), rec(1, "w", 1), rec(2, "w", 1), rec(3, "w", 5), rec(4, "w", 5)]
    report = check(acked, read)
    assert (report.lost, report.duplicated, report.moved, report.reordered) == (0, 2, 0, 0)


def test_moved_to_another_offset_or_partition() -> None:
    acked = [rec(0, "w", 0), rec(1, "w", 1), rec(0, "w", 2, partition=1)]
    read = [rec(0, "w", 0), rec(2, "w", 1), rec(0, "w", 2, partition=2)]
    report = check(acked, read)
    assert (report.lost, report.duplicated, report.moved, report.reordered) == (0, 0, 2, 0)


def test_reordered_counts_adjacent_inversions_per_writer_and_partition() -> None:
    # Acknowledged offsets say 0,1,2 but the log holds seq 2 before seq 1: both moved and reordered.
    acked = [rec(0, "w", 0), rec(1, "w", 1), rec(2, "w", 2), rec(3, "v", 0), rec(4, "v", 1)]
    read = [rec(0, "w", 0), rec(1, "w", 2), rec(2, "w", 1), rec(3, "v", 0), rec(4, "v", 1)]
    report = check(acked, read)
    assert report.reordered == 1 and report.moved == 2 and report.lost == 0
    # Interleaved writers are not an inversion.
    mixed = [rec(0, "a", 0), rec(1, "b", 0), rec(2, "a", 1), rec(3, "b", 1)]
    assert check(mixed, mixed).ok


def test_acknowledgement_without_offset_is_checked_for_presence_order_and_partition() -> None:
    acked = [rec(0, "w", 0), rec(UNKNOWN_OFFSET, "w", 1), rec(UNKNOWN_OFFSET, "w", 2), rec(3, "w", 3)]
    read = [rec(0, "w", 0), rec(1, "w", 1), rec(2, "w", 2), rec(3, "w", 3)]
    report = check(acked, read)
    assert report.ok and report.unknown_offset == 2
    assert check(acked, [read[0], rec(1, "w", 2), rec(2, "w", 1), read[3]]).reordered == 1
    assert check(acked, [read[0], read[2], read[3]]).lost == 1
    assert check(acked, [*read[:2], rec(2, "w", 2, partition=1), read[3]]).moved == 1


def test_acknowledged_twice_at_different_offsets_is_a_duplicate() -> None:
    report = check([rec(0, "w", 0), rec(5, "w", 0)], [rec(0, "w", 0)])
    assert report.duplicated == 1


@given(st.lists(st.integers(0, 50), unique=True, max_size=40), st.data())
def test_any_subset_lost_is_counted_exactly(seqs: list[int], data: st.DataObject) -> None:
    acked = [rec(offset, "w", seq) for offset, seq in enumerate(sorted(seqs))]
    kept = data.draw(st.lists(st.sampled_from(acked), unique=True) if acked else st.just([]))
    kept.sort(key=lambda r: r.offset)
    report = check(acked, kept)
    assert report.acknowledged == len(acked)
    assert report.lost == len(acked) - len(kept)
    assert (report.duplicated, report.moved, report.reordered) == (0, 0, 0)
