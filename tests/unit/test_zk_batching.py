"""Batching of the controller's ZooKeeper work (strom.cluster.zk_batching): multi-op chunks stay under
ZooKeeper's request limit, keep order, and a failed multi is split into retry and conflict."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.cluster.zk_batching import OP_OVERHEAD_BYTES, ZkStats, chunks, split_failed


@given(
    st.lists(st.integers(min_value=0, max_value=5000), max_size=300),
    st.integers(min_value=100, max_value=20_000),
    st.integers(min_value=1, max_value=50),
)
def test_chunks_keep_order_and_respect_both_bounds(sizes: list[int], max_bytes: int, max_ops: int) -> None:
    groups = chunks(sizes, lambda s: s, max_bytes, max_ops)
    assert [s for g in groups for s in g] == sizes
    for group in groups:
        assert 1 <= len(group) <= max_ops
        # A single item larger than the bound travels alone; otherwise the group fits.
        assert len(group) == 1 or sum(s + OP_OVERHEAD_BYTES for s in group) <= max_bytes


def test_ten_thousand_partition_states_fit_in_a_few_multis() -> None:
    # A state write is its path twice (set or create of state, plus parent) and ~100 bytes of JSON.
    groups = chunks(list(range(10_000)), lambda _: 2 * 40 + 96)
    assert len(groups) == 5  # bounded by MAX_MULTI_OPS (2,000), far below jute.maxbuffer
    assert chunks([], len) == []


def test_a_failed_multi_retries_all_but_the_failing_item() -> None:
    retry, failed = split_failed(["a", "b", "c", "d"], 2)
    assert (retry, failed) == (["a", "b", "d"], "c")
    assert split_failed(["a"], 0) == ([], "a")


def test_stats_difference_over_an_event() -> None:
    stats = ZkStats(reads=3, read_s=0.5, writes=1, write_s=0.25)
    before = stats.copy()
    stats.add(True, 0.0, count=10)  # started at perf_counter 0: a large elapsed time, counted as written
    stats.reads += 2
    delta = stats.since(before)
    assert (delta.reads, delta.writes) == (2, 10)
    assert delta.write_s > 0 and delta.read_s == 0
    assert delta.describe().startswith("ZooKeeper reads 2 in ")
    assert "writes 10" in delta.describe()
    assert (
        ZkStats(reads=1, store="local store").since(ZkStats()).describe().startswith("local store reads 1 ")
    )
