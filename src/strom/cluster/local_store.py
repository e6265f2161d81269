"""`MetadataStore` in memory: one tree shared by the sessions of a process, optionally persisted.

A single node (and the in-process cluster harness) keeps the cluster's metadata here instead of in
ZooKeeper; the controller, the ISR writes and the ACL and credential stores cannot tell the difference
(`strom.cluster.metadata_store` states the semantics both implementations keep).

Theory of operation.

* `LocalStore` is the tree (`strom.cluster.local_tree`: commits all or nothing, watches, ephemerals,
  persistence under a directory); `LocalSession` is one client of it (each broker of an in-process
  cluster has its own), implementing the port. Single operations are one-operation commits and raise
  the refusal itself rather than `MultiFailed`.
* **Watches** a commit fires are delivered with ``loop.call_soon_threadsafe`` on the loop of the
  session that left them, after the write, never inside it.
* **Sessions end** with `LocalSession.close` (its ephemerals are deleted in one commit, firing the
  other sessions' watches; its own watches are dropped). `LocalSession.expire` plays a ZooKeeper
  session expiry: the ephemerals go, the session's state callbacks hear ``LOST`` then
  ``RECONNECTED_NEW_SESSION`` under a new session id, and its dropped watches run once so they re-read
  and re-arm. `LocalSession.suspend`/`resume` play a lost and regained connection (operations raise
  `NotConnectedError` meanwhile; watches that fire meanwhile run on resume).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from strom.cluster.local_tree import MetadataTree
from strom.cluster.metadata_store import (
    Create,
    Delete,
    MultiFailed,
    NotConnectedError,
    Op,
    OpResult,
    SessionEvent,
    SetData,
    Stat,
    Watch,
    parent_of,
)
from strom.cluster.zk_batching import ZkStats

log = logging.getLogger(__name__)

__all__ = ["LocalSession", "LocalStore"]


class LocalStore(MetadataTree):
    """The tree, handing out sessions (optionally persisted under ``directory``)."""

    def session(self, loop: asyncio.AbstractEventLoop) -> LocalSession:
        """A new session whose watches and state events run on ``loop``."""
        with self.lock:
            session = LocalSession(self, loop, self.new_session_id())
            self.register(session)
            return session


class LocalSession:
    """One session on a `LocalStore`: the `MetadataStore` port."""

    def __init__(self, store: LocalStore, loop: asyncio.AbstractEventLoop, session_id: int) -> None:
        self._store = store
        self._loop = loop
        self._session_id = session_id
        self._state = SessionEvent.CONNECTED
        self._closed = False
        self._state_callbacks: list[Callable[[str], None]] = []
        self._deferred: list[Watch] = []
        self._expired_unseen = False
        self.stats = ZkStats(store="local store")  # named in the controller's timing lines

    # life cycle ------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 15.0) -> None:
        """Nothing to connect to: a session is connected from its creation."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._store.end_session(self)
        self._store.forget(self)
        self._deferred.clear()

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def session_state(self) -> str:
        return "LOST" if self._closed else str(self._state)

    def on_state_change(self, callback: Callable[[str], None]) -> None:
        self._state_callbacks.append(callback)

    def _announce(self, event: SessionEvent) -> None:
        for callback in self._state_callbacks:
            self._post(callback, str(event))

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(callback, *args)

    def deliver(self, callback: Watch) -> None:
        """A watch fired: run it on this session's loop (later, if disconnected)."""
        if self._closed:
            return
        if self._state is SessionEvent.SUSPENDED:
            self._deferred.append(callback)
        else:
            self._post(self._run_watch, callback)

    def _run_watch(self, callback: Watch) -> None:
        if self._closed:
            return
        try:
            callback()
        except Exception:  # one failing watch must not stop the others
            log.exception("a metadata watch failed")

    # simulated faults (tests, the in-process cluster harness) ---------------------------------------
    def suspend(self) -> None:
        """The connection is lost (the session lives on): operations fail until `resume`."""
        self._state = SessionEvent.SUSPENDED
        self._announce(SessionEvent.SUSPENDED)

    def resume(self) -> None:
        """The connection is back: the session's own (``CONNECTED``), or, if it expired meanwhile, a new
        one (``LOST`` then ``RECONNECTED_NEW_SESSION``, as a ZooKeeper client learns it on reconnecting)."""
        self._state = SessionEvent.CONNECTED
        if self._expired_unseen:
            self._expired_unseen = False
            self._renew()
        else:
            self._announce(SessionEvent.CONNECTED)
        self._rerun_deferred()

    def expire(self) -> None:
        """The session expires: its ephemerals go at once. A connected session reconnects with a new one
        at once and re-runs its watches (which re-read and re-arm); a suspended one learns it on
        `resume`."""
        self._deferred += self._store.end_session(self)
        if self._state is SessionEvent.SUSPENDED:
            self._expired_unseen = True
            return
        self._renew()
        self._rerun_deferred()

    def _renew(self) -> None:
        self._announce(SessionEvent.LOST)
        with self._store.lock:
            self._session_id = self._store.new_session_id()
        self._state = SessionEvent.CONNECTED
        self._announce(SessionEvent.RECONNECTED_NEW_SESSION)

    def _rerun_deferred(self) -> None:
        callbacks, self._deferred = self._deferred, []
        for callback in dict.fromkeys(callbacks):
            self._post(self._run_watch, callback)

    def _guard(self, write: bool, count: int = 1) -> None:
        """Refuse while not connected; count the request (reads and writes, as ZooKeeper's are)."""
        if self._closed or self._state is not SessionEvent.CONNECTED:
            raise NotConnectedError("the metadata-store session is not connected")
        if write:
            self.stats.writes += count
        else:
            self.stats.reads += count

    def _defer_watch(self, callback: Watch) -> None:
        if callback not in self._deferred:
            self._deferred.append(callback)

    # reads -------------------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, Stat]:
        self._guard(False)
        with self._store.lock:
            node = self._store.node(path)
            return node.data, node.stat()

    def exists(self, path: str) -> Stat | None:
        self._guard(False)
        with self._store.lock:
            node = self._store.lookup(path)
            return None if node is None else node.stat()

    def children(self, path: str) -> list[str]:
        self._guard(False)
        with self._store.lock:
            return sorted(self._store.node(path).children)

    # writes ------------------------------------------------------------------------------------------
    def _single(self, op: Op) -> OpResult:
        try:
            return self._store.commit(self._session_id, [op])[0]
        except MultiFailed as failed:
            raise failed.cause from None

    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        self._guard(True)
        op = Create(path, data, ephemeral, sequential)
        if not make_parents:
            return str(self._single(op))
        with self._store.lock:
            missing = self._missing_ancestors(path)
            try:
                results = self._store.commit(self._session_id, [*(Create(p) for p in missing), op])
            except MultiFailed as failed:
                raise failed.cause from None
            return str(results[-1])

    def _missing_ancestors(self, path: str) -> list[str]:
        missing: list[str] = []
        parent = parent_of(path)
        while self._store.lookup(parent) is None:
            missing.append(parent)
            parent = parent_of(parent)
        return missing[::-1]

    def ensure_path(self, path: str) -> None:
        self._guard(True)
        with self._store.lock:
            if self._store.lookup(path) is not None:
                return
            self._store.commit(self._session_id, [Create(p) for p in [*self._missing_ancestors(path), path]])

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        self._guard(True)
        result = self._single(SetData(path, data, version))
        assert isinstance(result, Stat)
        return result

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self._guard(True)
        if not recursive:
            self._single(Delete(path, version))
            return
        with self._store.lock:
            doomed: list[str] = []

            def walk(p: str) -> None:
                for child in sorted(self._store.node(p).children):
                    walk(f"{p}/{child}")
                doomed.append(p)

            walk(path)
            try:
                self._store.commit(
                    self._session_id, [Delete(p) for p in doomed[:-1]] + [Delete(path, version)]
                )
            except MultiFailed as failed:
                raise failed.cause from None

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        self._guard(True, len(ops))
        return self._store.commit(self._session_id, ops)

    # watches -----------------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Watch) -> list[str]:
        try:
            self._guard(False)
        except NotConnectedError:
            self._defer_watch(callback)
            raise
        with self._store.lock:
            self.ensure_path(path)
            self._store.add_watch(True, path, self, callback)
            return sorted(self._store.node(path).children)

    def watch_data(self, path: str, callback: Watch) -> bytes | None:
        try:
            self._guard(False)
        except NotConnectedError:
            self._defer_watch(callback)
            raise
        with self._store.lock:
            self._store.add_watch(False, path, self, callback)
            node = self._store.lookup(path)
            return None if node is None else node.data

    # bulk --------------------------------------------------------------------------------------------
    def get_many(
        self, paths: Sequence[str], watches: Sequence[Watch] | None = None
    ) -> list[tuple[bytes, Stat] | None]:
        self._guard(False, len(paths))
        found: list[tuple[bytes, Stat] | None] = []
        with self._store.lock:
            for i, path in enumerate(paths):
                node = self._store.lookup(path)
                if node is None:
                    found.append(None)
                    continue
                found.append((node.data, node.stat()))
                if watches is not None:
                    self._store.add_watch(False, path, self, watches[i])
        return found

    def exists_many(self, paths: Sequence[str]) -> list[Stat | None]:
        self._guard(False, len(paths))
        with self._store.lock:
            return [None if (node := self._store.lookup(p)) is None else node.stat() for p in paths]

    def multi_many(self, batches: Sequence[Sequence[Op]]) -> list[list[OpResult] | MultiFailed]:
        self._guard(True, len(batches))
        outcome: list[list[OpResult] | MultiFailed] = []
        for ops in batches:
            try:
                outcome.append(self._store.commit(self._session_id, ops))
            except MultiFailed as failed:
                outcome.append(failed)
        return outcome
