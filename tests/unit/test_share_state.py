"""A share-partition's durable state (KIP-932's share coordinator), pure: the state a leader writes,
what a new leader rebuilds from it, the coordinator's fencing, and the ``__share_group_state`` records."""

from __future__ import annotations

import pytest

from strom.coordinator.records import RecordFormatError, partition_for
from strom.coordinator.share.partition import AcknowledgeType, AcquiredRange, RecordState, SharePartition
from strom.coordinator.share.state import (
    DeliveryState,
    ShareState,
    StateBatch,
    StateKey,
    batches_from_wire,
    batches_to_wire,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    lag,
    restore,
    state_of,
    state_partition,
    written_state,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.uuid_text import uuid_text

LOCK_MS = 1000
TOPIC_ID = bytes(range(1, 17))


def worked_partition() -> SharePartition:
    """0-9 acquired by "a"; 0-2 accepted, 5 rejected, 6 released; 3, 4, 7-9 still acquired."""
    sp = SharePartition(start_offset=0, delivery_count_limit=3)
    assert sp.acquire("a", [(0, 9, False)], 10, 0, LOCK_MS) == [AcquiredRange(0, 9, 1)]
    assert sp.acknowledge("a", 0, 2, [int(AcknowledgeType.ACCEPT)]) is ErrorCode.NONE
    assert sp.acknowledge("a", 5, 5, [int(AcknowledgeType.REJECT)]) is ErrorCode.NONE
    assert sp.acknowledge("a", 6, 6, [int(AcknowledgeType.RELEASE)]) is ErrorCode.NONE
    return sp


def test_the_durable_state_has_the_start_offset_and_runs_of_one_state_and_count() -> None:
    state = state_of(worked_partition(), state_epoch=0, leader_epoch=4)
    available, archived = DeliveryState.AVAILABLE, DeliveryState.ARCHIVED
    # Acquired records are written AVAILABLE: a lock does not outlive its leader.
    assert state == ShareState(
        0,
        4,
        3,
        (
            StateBatch(3, 4, available, 1),
            StateBatch(5, 5, archived, 1),
            StateBatch(6, 9, available, 1),
        ),
    )


def test_a_new_leader_hands_out_only_the_undecided_records_counting_the_delivery() -> None:
    restored = restore(state_of(worked_partition(), 0, 4), delivery_count_limit=3)
    assert restored.start_offset == 3
    assert restored.end_offset == 10
    assert restored.counts()[RecordState.ACQUIRED] == 0
    got = restored.acquire("b", [(0, 9, False), (10, 11, False)], 100, 0, LOCK_MS)
    assert got == [AcquiredRange(3, 4, 2), AcquiredRange(6, 9, 2), AcquiredRange(10, 11, 1)]


def test_restoring_drops_the_done_records_at_the_head() -> None:
    acked = DeliveryState.ACKNOWLEDGED
    state = ShareState(0, 1, 5, (StateBatch(5, 6, acked, 1), StateBatch(7, 7, DeliveryState.AVAILABLE, 2)))
    restored = restore(state, delivery_count_limit=5)
    assert restored.start_offset == 7
    assert list(restored.in_flight) == [7]


def test_a_restored_record_at_the_delivery_limit_is_archived_when_released_again() -> None:
    state = ShareState(0, 1, 0, (StateBatch(0, 0, DeliveryState.AVAILABLE, 2),))
    restored = restore(state, delivery_count_limit=3)
    assert restored.acquire("a", [(0, 0, False)], 10, 0, LOCK_MS) == [AcquiredRange(0, 0, 3)]
    assert restored.release_member("a") == 1
    assert restored.start_offset == 1  # archived: never delivered again


def test_the_lag_counts_the_records_from_the_start_offset_to_the_high_watermark_not_done() -> None:
    state = state_of(worked_partition(), state_epoch=0, leader_epoch=4)  # 0-2 accepted: start 3
    # 3-9 in flight, 5 archived (done); 10-11 never handed out.
    assert lag(state, high_watermark=12) == 12 - 3 - 1
    # Batches past the high watermark a reader knows count only up to it.
    assert lag(state, high_watermark=5) == 2
    assert lag(ShareState(1, 0, start_offset=40), high_watermark=100) == 60
    assert lag(ShareState(1, 0, start_offset=40), high_watermark=30) == 0


def test_a_write_replaces_the_stored_state_and_drops_batches_below_its_start() -> None:
    stored = ShareState(0, 2, 10, (StateBatch(10, 12, DeliveryState.AVAILABLE, 1),))
    write = ShareState(0, 2, 12, (StateBatch(10, 11, DeliveryState.ACKNOWLEDGED, 1),))
    assert written_state(stored, write) == (ShareState(0, 2, 12, ()), ErrorCode.NONE)


def test_a_write_without_a_start_offset_keeps_the_stored_one() -> None:
    stored = ShareState(0, 2, 10)
    batch = StateBatch(10, 10, DeliveryState.ARCHIVED, 5)
    assert written_state(stored, ShareState(0, 3, -1, (batch,))) == (
        ShareState(0, 3, 10, (batch,)),
        ErrorCode.NONE,
    )
    assert written_state(None, ShareState(0, 3, -1)) == (None, ErrorCode.INVALID_REQUEST)


def test_a_deposed_leader_and_an_old_state_epoch_are_fenced() -> None:
    stored = ShareState(state_epoch=1, leader_epoch=5, start_offset=10)
    assert written_state(stored, ShareState(1, 4, 20)) == (stored, ErrorCode.FENCED_LEADER_EPOCH)
    assert written_state(stored, ShareState(0, 5, 20)) == (stored, ErrorCode.FENCED_STATE_EPOCH)
    assert written_state(stored, ShareState(1, 6, 20)) == (ShareState(1, 6, 20), ErrorCode.NONE)


def test_records_round_trip() -> None:
    key = StateKey("workers", TOPIC_ID, 7)
    state = ShareState(
        2,
        9,
        1234,
        (
            StateBatch(1234, 1300, DeliveryState.AVAILABLE, 3),
            StateBatch(1301, 1301, DeliveryState.ARCHIVED, 5),
        ),
    )
    assert decode_key(encode_key(key)) == key
    assert decode_value(encode_value(state)) == state
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00\x01" + encode_key(key)[2:])  # a ShareUpdate (type 1): not written by Strom
    with pytest.raises(RecordFormatError):
        decode_value(encode_value(state)[:-3])


def test_the_wire_form_of_state_batches_round_trips_and_refuses_unknown_states() -> None:
    batches = (StateBatch(0, 4, DeliveryState.ACKNOWLEDGED, 1), StateBatch(5, 5, DeliveryState.AVAILABLE, 2))
    assert batches_from_wire(batches_to_wire(batches)) == batches
    acquired = {"first_offset": 0, "last_offset": 0, "delivery_state": 1, "delivery_count": 1}
    with pytest.raises(ValueError):
        batches_from_wire([acquired])


def test_a_share_partition_has_its_state_partition_by_kafkas_key() -> None:
    key = StateKey("workers", TOPIC_ID, 3)
    assert key.coordinator_key() == f"workers:{uuid_text(TOPIC_ID)}:3"
    assert state_partition(key, 50) == partition_for(f"workers:{uuid_text(TOPIC_ID)}:3", 50)
    assert {state_partition(StateKey("workers", TOPIC_ID, p), 50) for p in range(20)} != {
        state_partition(key, 50)
    }
