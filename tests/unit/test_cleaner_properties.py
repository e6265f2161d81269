"""Hypothesis properties of compaction over random logs, and crashes at every step of the swap protocol."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import COMPACT, Fixture, Row, assert_compacted_view, latest_by_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom._util import filesystem
from strom.protocol.records.compression import CompressionType
from strom.storage.swap import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX

SMALL = dataclasses.replace(COMPACT, segment_bytes=700)
LEFTOVERS = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)

appends = st.lists(
    st.tuples(
        st.integers(0, 7),  # first key
        st.integers(1, 4),  # records in the batch
        st.booleans(),  # first record a tombstone
        st.sampled_from(
            [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD]
        ),
        st.booleans(),  # roll after it
    ),
    min_size=1,
    max_size=50,
)


def build(fx: Fixture, ops: list[tuple[int, int, bool, CompressionType, bool]]) -> list[Row]:
    for i, (key, count, tombstone, codec, roll) in enumerate(ops):
        records = [
            (b"k%d" % ((key + j) % 8), None if tombstone and j == 0 else b"v%d-%d" % (i, j))
            for j in range(count)
        ]
        fx.append(records, compression=codec)
        if roll:
            fx.roll()
    return fx.rows()


def check_invariants(
    fx: Fixture, original: list[Row], leo: int, *, tombstones_may_vanish: bool, compacted: bool = True
) -> list[Row]:
    rows = fx.rows()
    assert fx.log.log_end_offset == leo
    assert_compacted_view(original, rows, tombstones_may_vanish=tombstones_may_vanish)
    active = fx.log.active_segment.base_offset
    assert [r for r in rows if r[0] >= active] == [r for r in original if r[0] >= active]
    below = [r[1] for r in rows if r[0] < active]
    assert not compacted or len(below) == len(set(below)), (
        "at most one record per key below the active segment"
    )
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=appends, wait_for_horizon=st.booleans())
def test_cleaning_keeps_latest_per_key_offsets_and_log_end_offset(
    ops: list[tuple[int, int, bool, CompressionType, bool]], wait_for_horizon: bool
) -> None:
    with tempfile.TemporaryDirectory() as d:
        fx = Fixture(d, SMALL)
        original = build(fx, ops)
        leo = fx.log.log_end_offset
        fx.cleaner.clean_once()
        check_invariants(fx, original, leo, tombstones_may_vanish=False)
        if wait_for_horizon:
            fx.clock.now_ms += SMALL.delete_retention_ms
            fx.cleaner.clean_once()
            rows = check_invariants(fx, original, leo, tombstones_may_vanish=True)
            active = fx.log.active_segment.base_offset
            assert not [r for r in rows if r[0] < active and r[2] is None], "expired tombstones remain"
        else:
            fx.cleaner.clean_once()  # cleaning a clean log changes nothing that matters
            check_invariants(fx, original, leo, tombstones_may_vanish=False)
        rows = fx.rows()
        fx.reopen(clean=False)
        assert fx.rows() == rows


class Crash(Exception):
    """Stands in for kill -9 at one file-system step of the swap protocol."""


def crash_at(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def op(*args: Any, **kwargs: Any) -> Any:
            if calls[0] == step:
                raise Crash(f"crash before {real.__name__}{args}")
            calls[0] += 1
            return real(*args, **kwargs)

        return op

    monkeypatch.setattr(filesystem, "replace", wrap(filesystem.replace))
    monkeypatch.setattr(filesystem, "unlink", wrap(filesystem.unlink))


def test_a_crash_at_any_step_of_the_swap_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="strom.storage")
    step = 0
    while True:
        fx = Fixture(str(tmp_path / f"crash{step}"), SMALL)
        for i in range(60):
            fx.append([(b"k%d" % (i % 6), b"v%d" % i if i % 17 else None)], compression=i % 2)
        original, leo = fx.rows(), fx.log.log_end_offset
        with monkeypatch.context() as patch:
            crash_at(step, patch)
            try:
                fx.cleaner.clean_once()
                crashed = False
            except Crash:
                crashed = True
        fx.reopen(clean=False)  # the dead process's files as they are, recovered by the loader
        check_invariants(fx, original, leo, tombstones_may_vanish=False, compacted=not crashed)
        assert not [n for n in os.listdir(fx.log.dir) if n.endswith(LEFTOVERS)]
        fx.cleaner.clean_once()  # and the log still compacts afterwards
        rows = check_invariants(fx, original, leo, tombstones_may_vanish=False)
        assert latest_by_key(rows) == latest_by_key(original)
        if not crashed:
            break
        step += 1
    assert step > 20  # every rename and unlink of several group swaps was a crash point
    assert "completed the swap" in caplog.text  # crashes after the commit point were rolled forward
    assert "removing leftover file" in caplog.text  # and crashes before it rolled back
