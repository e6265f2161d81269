"""What only the local metadata store does: persistence (snapshot + journal, torn tail, compaction),
ephemerals never persisted, and the session faults it plays (expiry, a suspended connection)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.metadata_store_contract import until

from strom.cluster import local_journal
from strom.cluster.local_journal import JOURNAL, SNAPSHOT
from strom.cluster.local_store import LocalStore
from strom.cluster.metadata_store import MultiFailed, NotConnectedError, SetData


def test_persistent_nodes_survive_a_reopen_and_ephemerals_do_not(tmp_path: Path) -> None:
    async def write() -> tuple[int, str]:
        store = LocalStore(str(tmp_path))
        s = store.session(asyncio.get_running_loop())
        s.create("/config/topics/t", b'{"a": 1}', make_parents=True)
        s.set("/config/topics/t", b'{"a": 2}')
        s.ensure_path("/brokers/ids")
        s.create("/brokers/ids/1", b"me", ephemeral=True)
        s.create("/gone", b"x")
        s.delete("/gone")
        seq = s.create("/config/n_", sequential=True)
        czxid = s.get("/config/topics/t")[1].czxid
        store.close()
        return czxid, seq

    async def read(czxid: int, seq: str) -> None:
        store = LocalStore(str(tmp_path))
        s = store.session(asyncio.get_running_loop())
        data, stat = s.get("/config/topics/t")
        assert (data, stat.version, stat.czxid) == (b'{"a": 2}', 1, czxid)
        assert s.children("/brokers/ids") == []  # the ephemeral died with its session
        assert s.exists("/gone") is None
        later = s.create("/config/n_", sequential=True)  # the parent's counter was persisted
        assert int(later[-10:]) > int(seq[-10:])
        s.create("/new")
        assert s.get("/new")[1].czxid > czxid  # and so was the zxid
        store.close()

    czxid, seq = asyncio.run(write())
    asyncio.run(read(czxid, seq))


def _open(tmp_path: Path) -> LocalStore:
    return LocalStore(str(tmp_path))


def test_a_torn_journal_tail_is_ignored_and_cut_off(tmp_path: Path) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store = _open(tmp_path)
        s = store.session(loop)
        s.create("/a", b"1")
        s.create("/b", b"2")
        store.close()
        journal = tmp_path / JOURNAL
        whole = journal.read_bytes()
        journal.write_bytes(whole + whole.splitlines(keepends=True)[-1][:-7])  # a torn last write
        store = _open(tmp_path)
        s = store.session(loop)
        assert s.get("/a")[0] == b"1" and s.get("/b")[0] == b"2"
        assert journal.read_bytes() == whole  # cut back to the last whole line
        s.create("/c", b"3")
        store.close()
        store = _open(tmp_path)
        assert store.session(loop).get("/c")[0] == b"3"
        store.close()

    asyncio.run(scenario())


def test_a_corrupt_line_ends_the_replay(tmp_path: Path) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store = _open(tmp_path)
        s = store.session(loop)
        for name in ("a", "b", "c"):
            s.create(f"/{name}", name.encode())
        store.close()
        journal = tmp_path / JOURNAL
        lines = journal.read_bytes().splitlines(keepends=True)
        lines[1] = lines[1].replace(b'"/b"', b'"/B"')  # the CRC no longer matches
        journal.write_bytes(b"".join(lines))
        store = _open(tmp_path)
        s = store.session(loop)
        assert s.exists("/a") is not None
        assert s.exists("/b") is None and s.exists("/B") is None and s.exists("/c") is None
        store.close()

    asyncio.run(scenario())


def test_the_journal_is_compacted_into_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_journal, "COMPACT_FROM_BYTES", 2048)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store = _open(tmp_path)
        s = store.session(loop)
        s.create("/n", b"0")
        for i in range(200):
            s.set("/n", str(i).encode())
        assert (tmp_path / SNAPSHOT).exists()
        assert (tmp_path / JOURNAL).stat().st_size < 4096
        store.close()
        store = _open(tmp_path)
        data, stat = store.session(loop).get("/n")
        assert (data, stat.version) == (b"199", 200)
        store.close()

    asyncio.run(scenario())


def test_a_failed_multi_writes_nothing_to_the_journal(tmp_path: Path) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store = _open(tmp_path)
        s = store.session(loop)
        s.create("/a", b"1")
        before = (tmp_path / JOURNAL).read_bytes()
        with pytest.raises(MultiFailed):
            s.multi([SetData("/a", b"2"), SetData("/a", b"3", 0)])
        assert (tmp_path / JOURNAL).read_bytes() == before
        assert s.get("/a")[0] == b"1"
        store.close()

    asyncio.run(scenario())


def test_session_expiry_drops_ephemerals_and_re_runs_watches() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store = LocalStore()
        broker, other = store.session(loop), store.session(loop)
        events: list[str] = []
        broker.on_state_change(events.append)
        broker.ensure_path("/ids")
        broker.create("/ids/1", ephemeral=True)
        rearmed: list[int] = []
        broker.watch_children("/ids", lambda: rearmed.append(1))
        seen_by_other: list[int] = []
        other.watch_children("/ids", lambda: seen_by_other.append(1))
        old_id = broker.session_id
        broker.expire()
        await until(lambda: bool(rearmed) and bool(seen_by_other), "the watches")
        assert other.children("/ids") == []
        assert events == ["LOST", "RECONNECTED_NEW_SESSION"]
        assert broker.session_id != old_id
        broker.create("/ids/1", ephemeral=True)  # registering again, under the new session
        stat = other.exists("/ids/1")
        assert stat is not None and stat.ephemeral_owner == broker.session_id
        store.close()

    asyncio.run(scenario())


def test_a_suspended_session_refuses_and_runs_missed_watches_on_resume() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        store = LocalStore()
        s, writer = store.session(loop), store.session(loop)
        fired: list[str] = []
        s.watch_data("/x", lambda: fired.append("x"))
        s.suspend()
        with pytest.raises(NotConnectedError):
            s.get("/x")
        with pytest.raises(NotConnectedError):
            s.watch_children("/y", lambda: fired.append("y"))  # kept, run once connected
        writer.create("/x")
        await asyncio.sleep(0)
        assert fired == []
        s.resume()
        await until(lambda: sorted(fired) == ["x", "y"], "the missed watches")
        assert s.session_state == "CONNECTED"
        store.close()

    asyncio.run(scenario())
