"""The metadata-store port's contract, written once: tests/unit/test_metadata_store_contract.py runs it
against the local store, tests/cluster/test_metadata_store_zookeeper.py against a real ZooKeeper (each
imports these tests and provides the ``backend`` fixture).

Versions and conditional writes, multi all or nothing, sequential names, ephemerals ending with their
session, one-shot watches delivered on the loop after the write, the bulk forms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import pytest

from strom.cluster.local_store import LocalSession, LocalStore
from strom.cluster.metadata_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    MetadataStore,
    MultiFailed,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetData,
    Stat,
)

WAIT_S = 10.0


class Backend(Protocol):
    def open(self, loop: asyncio.AbstractEventLoop, session_timeout_ms: int = 10_000) -> MetadataStore: ...

    async def expire(self, session: MetadataStore) -> None:
        """End the session on the server, as its expiry does; the client learns it on reconnecting."""


class LocalBackend:
    def __init__(self) -> None:
        self.store = LocalStore()

    def open(self, loop: asyncio.AbstractEventLoop, session_timeout_ms: int = 10_000) -> MetadataStore:
        return self.store.session(loop)

    async def expire(self, session: MetadataStore) -> None:
        assert isinstance(session, LocalSession)
        session.suspend()
        session.expire()
        await asyncio.sleep(0)
        session.resume()


Scenario = Callable[[Callable[[], MetadataStore]], Awaitable[None]]
#: A session the expiry test may lose quickly (ZooKeeper's minimum is two ticks: 1 s here).
SHORT_SESSION_MS = 2_000


def run(backend: Backend, scenario: Scenario) -> None:
    """Run ``scenario(open_session)`` in a fresh loop; every session it opened is closed after."""

    async def main() -> None:
        opened: list[MetadataStore] = []

        def open_session() -> MetadataStore:
            session = backend.open(asyncio.get_running_loop())
            opened.append(session)
            return session

        try:
            await scenario(open_session)
        finally:
            for session in opened:
                session.close()

    asyncio.run(main())


async def until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the loop until ``condition`` holds (watches arrive through the loop)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def barrier(store: MetadataStore, path: str) -> None:
    """Wait until every watch event the server sent this session before now has run: a fresh watch on
    a node of our own, fired by our own write, runs after them (events reach a session in order)."""
    fired: list[int] = []
    store.watch_data(path, lambda: fired.append(1))
    store.create(path)
    await until(lambda: bool(fired), f"the barrier {path}")


def test_versions_and_conditional_writes(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        s = open_session()
        assert s.create("/a", b"one") == "/a"
        data, stat = s.get("/a")
        assert (data, stat.version, stat.ephemeral_owner) == (b"one", 0, 0)
        assert s.set("/a", b"two", 0).version == 1
        with pytest.raises(BadVersionError):
            s.set("/a", b"three", 0)
        assert s.get("/a")[0] == b"two"
        with pytest.raises(NodeExistsError):
            s.create("/a")
        with pytest.raises(NoNodeError):
            s.create("/missing/child")
        with pytest.raises(NoNodeError):
            s.get("/missing")
        assert s.exists("/missing") is None
        s.create("/a/b")
        with pytest.raises(NotEmptyError):
            s.delete("/a")
        with pytest.raises(BadVersionError):
            s.delete("/a/b", 5)
        s.delete("/a/b", 0)
        s.delete("/a", 1)
        assert s.exists("/a") is None

    run(backend, scenario)


def test_make_parents_ensure_path_and_recursive_delete(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        s = open_session()
        s.create("/x/y/z", b"deep", make_parents=True)
        assert s.get("/x/y/z")[0] == b"deep"
        assert s.get("/x/y")[0] == b""
        s.ensure_path("/x/y/w")
        s.ensure_path("/x/y/w")  # a second time is no error
        assert sorted(s.children("/x/y")) == ["w", "z"]
        s.delete("/x", recursive=True)
        assert s.exists("/x") is None

    run(backend, scenario)


def test_sequential_names_count_up_per_parent(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        s = open_session()
        s.create("/seq")
        first = s.create("/seq/n_", b"1", sequential=True)
        second = s.create("/seq/n_", b"2", sequential=True)
        assert first.startswith("/seq/n_") and len(first) == len("/seq/n_") + 10
        assert int(second[-10:]) > int(first[-10:])
        s.delete(first)
        third = s.create("/seq/n_", b"3", sequential=True)
        assert int(third[-10:]) > int(second[-10:])  # a deleted name is never handed out again
        assert sorted(s.children("/seq")) == [second.rsplit("/", 1)[1], third.rsplit("/", 1)[1]]

    run(backend, scenario)


def test_creation_ids_grow(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        s = open_session()
        s.create("/c1")
        s.set("/c1", b"x")
        s.create("/c2")
        first, second = s.exists("/c1"), s.exists("/c2")
        assert first is not None and second is not None and second.czxid > first.czxid

    run(backend, scenario)


def test_multi_applies_all_or_nothing(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        s = open_session()
        s.create("/m")
        s.create("/m/old", b"o")
        results = s.multi(
            [Check("/m", 0), Create("/m/new", b"n"), SetData("/m/old", b"o2", 0), Delete("/m/new")]
        )
        assert results[0] is None and results[1] == "/m/new" and results[3] is None
        assert isinstance(results[2], Stat) and results[2].version == 1
        with pytest.raises(MultiFailed) as failed:
            s.multi([Create("/m/a"), SetData("/m/old", b"x", 0), Create("/m/b")])
        assert failed.value.index == 1 and isinstance(failed.value.cause, BadVersionError)
        assert s.exists("/m/a") is None and s.exists("/m/b") is None
        assert s.get("/m/old") == (b"o2", s.get("/m/old")[1]) and s.get("/m/old")[1].version == 1
        with pytest.raises(MultiFailed) as failed:
            s.multi([Create("/m/a"), Create("/m/a")])
        assert failed.value.index == 1 and isinstance(failed.value.cause, NodeExistsError)
        assert s.exists("/m/a") is None

    run(backend, scenario)


def test_an_epoch_check_fences_a_deposed_writer(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        old, new = open_session(), open_session()
        old.create("/epoch", b"1")
        old.create("/state", b"a")
        assert old.multi([Check("/epoch", 0), SetData("/state", b"b")])
        new.set("/epoch", b"2", 0)  # another writer was elected
        with pytest.raises(MultiFailed) as failed:
            old.multi([Check("/epoch", 0), SetData("/state", b"c")])
        assert failed.value.index == 0 and isinstance(failed.value.cause, BadVersionError)
        assert new.get("/state")[0] == b"b"

    run(backend, scenario)


def test_ephemerals_end_with_their_session_and_fire_watches(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        owner, watcher = open_session(), open_session()
        owner.ensure_path("/ids")
        owner.create("/ids/1", b"me", ephemeral=True)
        stat = watcher.exists("/ids/1")
        assert stat is not None and stat.ephemeral_owner == owner.session_id != 0
        fired: list[str] = []
        assert watcher.watch_children("/ids", lambda: fired.append("children")) == ["1"]
        assert watcher.watch_data("/ids/1", lambda: fired.append("data")) == b"me"
        owner.close()
        await until(lambda: len(fired) == 2, "both watches")
        assert sorted(fired) == ["children", "data"]
        assert watcher.children("/ids") == []

    run(backend, scenario)


def test_watches_are_one_shot_run_after_the_write_and_re_arm(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        writer, watcher = open_session(), open_session()
        fired: list[str] = []
        # watch_data on an absent node fires on its creation
        assert watcher.watch_data("/w", lambda: fired.append("created")) is None
        writer.create("/w", b"0")
        assert fired == []  # never inside the write
        await until(lambda: fired == ["created"], "the creation")
        assert watcher.watch_data("/w", lambda: fired.append("changed")) == b"0"
        writer.set("/w", b"1")
        writer.set("/w", b"2")
        await barrier(watcher, "/barrier1")
        assert fired == ["created", "changed"]  # one-shot: the second set fired nothing
        assert watcher.watch_data("/w", lambda: fired.append("deleted")) == b"2"
        writer.delete("/w")
        await until(lambda: fired[-1:] == ["deleted"], "the deletion")

    run(backend, scenario)


def test_children_watch_fires_on_a_child_created_or_deleted(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        writer, watcher = open_session(), open_session()
        fired: list[list[str]] = []

        def on_change() -> None:
            fired.append(sorted(watcher.watch_children("/topics", on_change)))  # re-arm, read again

        assert watcher.watch_children("/topics", on_change) == []  # made if missing
        writer.create("/topics/a")
        await until(lambda: fired == [["a"]], "a child created")
        writer.set("/topics/a", b"data")  # not a children change
        writer.create("/topics/b")
        await until(lambda: len(fired) == 2, "a second child")
        writer.delete("/topics/a")
        await until(lambda: len(fired) == 3, "a child deleted")
        assert fired == [["a"], ["a", "b"], ["b"]]

    run(backend, scenario)


def test_bulk_reads_and_writes(backend: Backend) -> None:
    async def scenario(open_session: Callable[[], MetadataStore]) -> None:
        s, writer = open_session(), open_session()
        s.create("/bulk")
        for i in range(5):
            s.create(f"/bulk/{i}", str(i).encode())
        paths = [f"/bulk/{i}" for i in range(7)]
        fired: list[int] = []
        watches = [lambda i=i: fired.append(i) for i in range(7)]
        found = s.get_many(paths, watches)
        assert [None if f is None else f[0] for f in found] == [b"0", b"1", b"2", b"3", b"4", None, None]
        assert [stat is not None for stat in s.exists_many(paths)] == [True] * 5 + [False] * 2
        writer.set("/bulk/3", b"x")
        writer.create("/bulk/6")  # no watch was left on a node that was absent
        await barrier(s, "/bulk-barrier")
        assert fired == [3]
        outcome = s.multi_many(
            [[SetData("/bulk/0", b"a", 0)], [SetData("/bulk/1", b"b", 7)], [Create("/bulk/9")]]
        )
        assert isinstance(outcome[0], list) and isinstance(outcome[2], list)
        assert isinstance(outcome[1], MultiFailed) and isinstance(outcome[1].cause, BadVersionError)
        assert s.get("/bulk/0")[0] == b"a" and s.get("/bulk/1")[0] == b"1"

    run(backend, scenario)


def test_an_expired_session_loses_its_ephemerals_and_comes_back_new(backend: Backend) -> None:
    """The sequence a broker lives through when its session expires: SUSPENDED, LOST, then connected
    again under a new session id (RECONNECTED_NEW_SESSION); its ephemerals are gone and the watches the
    lost connection dropped run once, so they re-read and re-arm."""

    async def main() -> None:
        session = backend.open(asyncio.get_running_loop(), SHORT_SESSION_MS)
        try:
            events: list[str] = []
            session.on_state_change(events.append)
            session.ensure_path("/ids")
            session.create("/ids/1", b"me", ephemeral=True)
            rerun: list[list[str]] = []

            def on_children() -> None:
                rerun.append(sorted(session.watch_children("/ids", on_children)))

            assert session.watch_children("/ids", on_children) == ["1"]
            old_id = session.session_id
            await backend.expire(session)
            await until(lambda: "RECONNECTED_NEW_SESSION" in events, "a new session")
            lost = events.index("LOST")
            assert "SUSPENDED" in events[:lost] and "RECONNECTED_NEW_SESSION" in events[lost:]
            assert session.session_id not in (0, old_id)
            assert session.exists("/ids/1") is None
            await until(lambda: [] in rerun, "the dropped watch to re-run and read the children again")
            session.create("/ids/1", b"again", ephemeral=True)  # registering again works
            await until(lambda: rerun[-1] == ["1"], "the re-armed watch")
        finally:
            session.close()

    asyncio.run(main())


# Every test above, for the modules that run the contract on one store (`from ... import *`): a test
# added here runs on both stores without being listed twice.
__all__ = sorted(name for name in dict(globals()) if name.startswith("test_"))  # noqa: PLE0605
