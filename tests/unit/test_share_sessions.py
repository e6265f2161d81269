"""The leader's share-session cache: bounded, idle sessions evicted after the session timeout."""

from __future__ import annotations

from strom.coordinator.share.sessions import ShareSessionCache

TIMEOUT_MS = 6000


def test_a_full_cache_refuses_a_new_session_until_one_is_idle() -> None:
    cache = ShareSessionCache(max_sessions=2, eviction_ms=TIMEOUT_MS)
    assert cache.open("g", "a", 0) is not None
    assert cache.open("g", "b", 1000) is not None
    assert cache.open("g", "c", 2000) is None
    assert len(cache) == 2
    # Re-opening an existing member's session replaces it and needs no room.
    again = cache.open("g", "a", 3000)
    assert again is not None and again.next_epoch == 1
    assert len(cache) == 2
    # "b" was last used at 1000: stale only once more than the timeout has passed.
    assert cache.expire(1000 + TIMEOUT_MS) == []
    (evicted,) = cache.expire(1001 + TIMEOUT_MS)
    assert (evicted.group_id, evicted.member_id) == ("g", "b")
    assert ("g", "b") not in cache and ("g", "a") in cache
    assert cache.open("g", "c", 1001 + TIMEOUT_MS) is not None


def test_only_use_keeps_a_session_alive_and_expiry_takes_the_idle_in_order() -> None:
    cache = ShareSessionCache(max_sessions=10, eviction_ms=TIMEOUT_MS)
    for i, member in enumerate("abc"):
        session = cache.open("g", member, i)
        assert session is not None
        session.partitions.add(("t", i))
    used = cache.get("g", "a")
    assert used is not None
    cache.touch(used, 5000)
    assert used.last_used_ms == 5000
    evicted = cache.expire(10_000)
    assert [(s.member_id, s.partitions) for s in evicted] == [("b", {("t", 1)}), ("c", {("t", 2)})]
    assert len(cache) == 1 and cache.get("g", "b") is None
    assert [s.member_id for s in cache.expire(5001 + TIMEOUT_MS)] == ["a"]
    assert len(cache) == 0


def test_remove_forgets_only_that_session() -> None:
    cache = ShareSessionCache(max_sessions=10, eviction_ms=TIMEOUT_MS)
    first = cache.open("g", "a", 0)
    assert first is not None
    second = cache.open("g", "a", 10)  # the member re-opened: the old object no longer counts
    assert second is not None
    cache.remove(first)
    assert cache.get("g", "a") is second
    cache.remove(second)
    assert ("g", "a") not in cache and len(cache) == 0


def test_a_group_has_sessions_until_its_last_one_goes() -> None:
    cache = ShareSessionCache(max_sessions=10, eviction_ms=TIMEOUT_MS)
    a = cache.open("g", "a", 0)
    b = cache.open("g", "b", 0)
    assert a is not None and b is not None
    assert cache.has_group("g") and not cache.has_group("h")
    cache.remove(a)
    assert cache.has_group("g")
    cache.remove(b)
    assert not cache.has_group("g")
