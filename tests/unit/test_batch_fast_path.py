"""`single_client_batch` (the produce path's one-batch case) accepts exactly what
`validate_client_batches` accepts as a single batch, with the same header fields."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_storage_support import make_batch

from strom.protocol.records.batch import (
    CONTROL_BIT,
    RecordValidationError,
    header_of,
    single_client_batch,
    validate_client_batches,
)

MAX = 1_000


def both(payload: bytes, max_message_bytes: int = MAX) -> tuple[object, object]:
    fast = single_client_batch(memoryview(bytearray(payload)), max_message_bytes)
    try:
        full: object = validate_client_batches(bytearray(payload), max_message_bytes)
    except RecordValidationError as exc:
        full = exc.code
    return (None if fast is None else header_of(fast)), full


def agrees(payload: bytes, max_message_bytes: int = MAX) -> None:
    fast, full = both(payload, max_message_bytes)
    if fast is None:  # refused, or more than one batch: the full check decides
        assert not (isinstance(full, list) and len(full) == 1)
    else:
        assert full == [(0, fast)]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5),
    st.sampled_from([-1, 0, 7]),
    st.sampled_from([-1, 0, 3]),
    st.sampled_from([0, 1, CONTROL_BIT]),
    st.data(),
)
def test_fast_check_agrees_with_the_full_one(
    count: int, producer_id: int, base_sequence: int, attributes: int, data: st.DataObject
) -> None:
    batch = bytearray(
        make_batch(count=count, producer_id=producer_id, base_sequence=base_sequence, attributes=attributes)
    )
    for _ in range(data.draw(st.integers(0, 2))):
        at = data.draw(st.integers(0, len(batch) - 1))
        batch[at] ^= data.draw(st.integers(1, 255))
    agrees(bytes(batch), data.draw(st.sampled_from([MAX, len(batch), len(batch) - 1])))


@pytest.mark.parametrize("cut", [0, 10, 60, 61, -1])
def test_truncated_or_doubled_payloads_take_the_full_path(cut: int) -> None:
    batch = make_batch(count=3)
    agrees(batch[:cut])
    fast, full = both(batch + batch)
    assert fast is None and isinstance(full, list) and len(full) == 2


def test_a_valid_batch_takes_the_fast_path() -> None:
    fast, full = both(make_batch(count=4, producer_id=5, base_sequence=0, producer_epoch=0))
    assert fast is not None and full == [(0, fast)]
