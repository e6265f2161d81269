"""Pure retention decisions (Kafka's deleteOldSegments rules)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.storage.retention import RetentionPolicy, SegmentSummary, segments_to_delete

DAY = 86_400_000


def segs(*specs: tuple[int, int, int]) -> list[SegmentSummary]:
    """(base, size, largest_ts) per segment; next_offset = next base (last one: base + 10)."""
    out = []
    for i, (base, size, ts) in enumerate(specs):
        nxt = specs[i + 1][0] if i + 1 < len(specs) else base + 10
        out.append(SegmentSummary(base, nxt, size, ts))
    return out


LOG = segs((0, 100, 1_000), (10, 100, 2_000), (20, 100, 3_000), (30, 50, 4_000))


def test_time_retention() -> None:
    policy = RetentionPolicy(retention_ms=1_500, retention_bytes=-1, delete_enabled=True)
    assert segments_to_delete(LOG, policy, now_ms=4_000, log_start_offset=0, high_watermark=40) == 2
    assert segments_to_delete(LOG, policy, now_ms=100_000, log_start_offset=0, high_watermark=40) == 4


def test_unlimited_and_compact_only() -> None:
    assert segments_to_delete(LOG, RetentionPolicy(-1, -1, True), 10**12, 0, 40) == 0
    assert segments_to_delete(LOG, RetentionPolicy(1, 1, False), 10**12, 0, 40) == 0


def test_high_watermark_bounds_deletion() -> None:
    policy = RetentionPolicy(1, -1, True)
    assert segments_to_delete(LOG, policy, 10**12, 0, high_watermark=19) == 1
    assert segments_to_delete(LOG, policy, 10**12, 0, high_watermark=0) == 0


def test_size_retention() -> None:
    policy = RetentionPolicy(-1, 200, True)
    assert (
        segments_to_delete(LOG, policy, 0, 0, 40) == 1
    )  # 350 - 100 = 250 >= 200, minus another would be 150
    assert segments_to_delete(LOG, RetentionPolicy(-1, 0, True), 0, 0, 40) == 4


def test_log_start_offset_rule_applies_to_any_policy() -> None:
    policy = RetentionPolicy(-1, -1, False)
    assert segments_to_delete(LOG, policy, 0, log_start_offset=25, high_watermark=40) == 2
    assert segments_to_delete(LOG, policy, 0, log_start_offset=20, high_watermark=40) == 2
    assert segments_to_delete(LOG, policy, 0, log_start_offset=19, high_watermark=40) == 1


def test_empty_active_segment_is_kept() -> None:
    log = segs((0, 100, 1), (10, 0, -1))
    assert segments_to_delete(log, RetentionPolicy(1, -1, True), DAY, 0, 10) == 1


@given(
    st.lists(
        st.tuples(st.integers(1, 5), st.integers(0, 500), st.integers(0, 10_000)), min_size=1, max_size=8
    ),
    st.integers(-1, 5_000),
    st.integers(-1, 2_000),
    st.booleans(),
    st.integers(0, 20_000),
    st.integers(0, 60),
)
def test_properties(
    specs: list[tuple[int, int, int]],
    retention_ms: int,
    retention_bytes: int,
    delete_enabled: bool,
    now_ms: int,
    hw: int,
) -> None:
    base = 0
    rows = []
    for width, size, ts in specs:
        rows.append((base, size, ts))
        base += width
    log = segs(*rows)
    policy = RetentionPolicy(retention_ms, retention_bytes, delete_enabled)
    n = segments_to_delete(log, policy, now_ms, 0, hw)
    assert 0 <= n <= len(log)
    for s in log[:n]:  # only data below the high watermark is deleted
        assert s.next_offset <= hw
    if n == len(log):
        assert log[-1].size_bytes > 0
    if retention_bytes >= 0 and delete_enabled and retention_ms < 0:
        assert sum(s.size_bytes for s in log[n:]) >= min(retention_bytes, sum(s.size_bytes for s in log))
