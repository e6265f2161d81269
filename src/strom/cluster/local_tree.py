"""The in-memory metadata tree behind `strom.cluster.local_store`: nodes, commits, watches, persistence.

Theory of operation.

* **One lock** (``lock``, re-entrant) guards the tree; sessions take it for every operation, so they may
  be used from the event loop and from worker threads alike.
* **Writes** go through `MetadataTree.commit`: each operation of a multi is applied in order with an
  undo record; the first refusal undoes the applied ones and raises `MultiFailed`. A commit that
  writes takes one zxid (the creation id of the nodes it creates, ZooKeeper's czxid). With a directory,
  the commit's persistent node images are appended to the journal (`strom.cluster.local_journal`) and
  fsynced before the commit returns; a journal that cannot be written undoes the commit and raises
  `MetadataStoreError`.
* **Watches** fired by a commit are taken off the tree inside the lock and handed, after it, to the
  `Subscriber` (session) that left them, which runs them on its event loop: never re-entrantly inside
  the write, always after it is applied. They are one-shot. A commit fires the data watches of the
  nodes it creates, sets or deletes, and the child watches of the nodes it deletes and of the parents
  whose children it changes.
* **Ephemeral** nodes carry their session's id; `MetadataTree.end_session` deletes them in one commit
  (firing the other sessions' watches) and drops the session's own watches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strom.cluster.local_journal import MetadataJournal, PersistedNode
from strom.cluster.metadata_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    MetadataStoreError,
    MultiFailed,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SetData,
    Stat,
    Watch,
    parent_of,
)

__all__ = ["MetadataTree", "Subscriber", "TreeNode"]

_REFUSALS = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)


class Subscriber(Protocol):
    """A session as the tree sees it: who owns ephemerals and receives fired watches."""

    @property
    def session_id(self) -> int: ...

    def deliver(self, callback: Watch) -> None: ...

    def close(self) -> None: ...


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class TreeNode:
    data: bytes
    version: int
    cversion: int
    ctime_ms: int
    czxid: int
    owner: int
    children: set[str] = field(default_factory=set)

    def stat(self) -> Stat:
        return Stat(self.version, self.ctime_ms, self.czxid, self.owner)


@dataclass(slots=True)
class _Commit:
    """What one commit changed, for undo, persistence and watches."""

    undo: list[Callable[[], None]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    data_fired: set[str] = field(default_factory=set)
    child_fired: set[str] = field(default_factory=set)


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


class MetadataTree:
    def __init__(self, directory: str | None = None, time_ms: Callable[[], int] = _wall_ms) -> None:
        self.lock = threading.RLock()
        self._time_ms = time_ms
        self._nodes: dict[str, TreeNode] = {"/": TreeNode(b"", 0, 0, 0, 0, 0)}
        self._zxid = 0
        self._next_session = 1
        self._data_watches: dict[str, list[tuple[Subscriber, Watch]]] = {}
        self._child_watches: dict[str, list[tuple[Subscriber, Watch]]] = {}
        self._sessions: set[Subscriber] = set()
        self._journal: MetadataJournal | None = None
        if directory is not None:
            self._journal = MetadataJournal(directory)
            persisted, self._zxid = self._journal.load()
            for path in sorted(persisted, key=lambda p: p.count("/")):
                self._restore(path, persisted[path])

    def _restore(self, path: str, node: PersistedNode) -> None:
        parent = parent_of(path)
        if parent not in self._nodes:  # never written without its parent; be lenient all the same
            self._restore(parent, PersistedNode(b"", 0, 0, node.ctime_ms, node.czxid))
        self._nodes[path] = TreeNode(node.data, node.version, node.cversion, node.ctime_ms, node.czxid, 0)
        self._nodes[parent].children.add(_name(path))

    def new_session_id(self) -> int:
        session_id = self._next_session
        self._next_session += 1
        return session_id

    def close(self) -> None:
        """Close every session, then the journal."""
        with self.lock:
            for session in list(self._sessions):
                session.close()
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    # reads (lock held by the caller) ------------------------------------------------------------------
    def node(self, path: str) -> TreeNode:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    def lookup(self, path: str) -> TreeNode | None:
        return self._nodes.get(path)

    def add_watch(self, children: bool, path: str, session: Subscriber, callback: Watch) -> None:
        table = self._child_watches if children else self._data_watches
        table.setdefault(path, []).append((session, callback))

    def persistent_nodes(self) -> Iterator[tuple[str, PersistedNode]]:
        with self.lock:
            for path, node in self._nodes.items():
                if path != "/" and node.owner == 0:
                    yield (
                        path,
                        PersistedNode(node.data, node.version, node.cversion, node.ctime_ms, node.czxid),
                    )

    # the commit -------------------------------------------------------------------------------------
    def commit(self, owner: int, ops: Sequence[Op]) -> list[OpResult]:
        """Apply ``ops`` all or nothing for session ``owner``; raises `MultiFailed` on a refusal."""
        with self.lock:
            change = _Commit()
            zxid = self._zxid + 1
            results: list[OpResult] = []
            for index, op in enumerate(ops):
                try:
                    results.append(self._apply(op, owner, zxid, change))
                except _REFUSALS as exc:
                    self._undo(change)
                    raise MultiFailed(index, exc) from None
            if any(not isinstance(op, Check) for op in ops):
                self._zxid = zxid
                try:
                    self._persist(zxid, change)
                except OSError as exc:
                    self._undo(change)
                    self._zxid = zxid - 1
                    raise MetadataStoreError(f"writing the metadata journal: {exc}") from exc
            fired = self._take_watches(change)
        for session, callback in fired:
            session.deliver(callback)
        return results

    def _undo(self, change: _Commit) -> None:
        for undo in reversed(change.undo):
            undo()

    def _apply(self, op: Op, owner: int, zxid: int, change: _Commit) -> OpResult:
        if isinstance(op, Check):
            node = self.node(op.path)
            if op.version not in (-1, node.version):
                raise BadVersionError(op.path)
            return None
        if isinstance(op, Create):
            return self._create(op, owner, zxid, change)
        if isinstance(op, SetData):
            node = self.node(op.path)
            if op.version not in (-1, node.version):
                raise BadVersionError(op.path)
            old = node.data, node.version

            def undo_set() -> None:
                node.data, node.version = old

            node.data, node.version = op.data, node.version + 1
            change.undo.append(undo_set)
            change.touched.add(op.path)
            change.data_fired.add(op.path)
            return node.stat()
        self._delete(op, change)
        return None

    def _create(self, op: Create, owner: int, zxid: int, change: _Commit) -> str:
        parent_path = parent_of(op.path)
        parent = self.node(parent_path)
        if parent.owner:
            raise NoNodeError(f"{parent_path} is ephemeral and cannot have children")
        path = f"{op.path}{parent.cversion:010d}" if op.sequential else op.path
        if path in self._nodes:
            raise NodeExistsError(path)
        self._nodes[path] = TreeNode(op.data, 0, 0, self._time_ms(), zxid, owner if op.ephemeral else 0)
        parent.children.add(_name(path))
        parent.cversion += 1

        def undo_create() -> None:
            del self._nodes[path]
            parent.children.discard(_name(path))
            parent.cversion -= 1

        change.undo.append(undo_create)
        change.touched.update((path, parent_path))
        change.data_fired.add(path)
        change.child_fired.add(parent_path)
        return path

    def _delete(self, op: Delete, change: _Commit) -> None:
        node = self.node(op.path)
        if op.version not in (-1, node.version):
            raise BadVersionError(op.path)
        if node.children:
            raise NotEmptyError(op.path)
        parent_path = parent_of(op.path)
        parent = self._nodes[parent_path]
        del self._nodes[op.path]
        parent.children.discard(_name(op.path))
        parent.cversion += 1

        def undo_delete() -> None:
            self._nodes[op.path] = node
            parent.children.add(_name(op.path))
            parent.cversion -= 1

        change.undo.append(undo_delete)
        change.touched.update((op.path, parent_path))
        change.data_fired.add(op.path)
        change.child_fired.update((op.path, parent_path))

    def _persist(self, zxid: int, change: _Commit) -> None:
        if self._journal is None:
            return
        puts: list[tuple[str, PersistedNode]] = []
        deletes: list[str] = []
        for path in sorted(change.touched):
            node = self._nodes.get(path)
            if node is None:
                deletes.append(path)
            elif node.owner == 0 and path != "/":
                puts.append(
                    (path, PersistedNode(node.data, node.version, node.cversion, node.ctime_ms, node.czxid))
                )
        if not puts and not deletes:
            return
        self._journal.append(zxid, puts, deletes)
        if self._journal.needs_compaction():
            self._journal.compact(self.persistent_nodes(), zxid)

    def _take_watches(self, change: _Commit) -> list[tuple[Subscriber, Watch]]:
        fired: list[tuple[Subscriber, Watch]] = []
        for path in sorted(change.data_fired):
            fired += self._data_watches.pop(path, ())
        for path in sorted(change.child_fired):
            fired += self._child_watches.pop(path, ())
        return fired

    # sessions -------------------------------------------------------------------------------------------
    def end_session(self, session: Subscriber) -> list[Watch]:
        """Delete the session's ephemerals (one commit) and drop its watches; the dropped callbacks."""
        with self.lock:
            owned = [path for path, node in self._nodes.items() if node.owner == session.session_id]
            if owned:
                self.commit(session.session_id, [Delete(path) for path in owned])
            dropped: list[Watch] = []
            for table in (self._data_watches, self._child_watches):
                for path in list(table):
                    mine = [cb for s, cb in table[path] if s is session]
                    if mine:
                        dropped += mine
                        table[path] = [(s, cb) for s, cb in table[path] if s is not session]
                        if not table[path]:
                            del table[path]
            return dropped

    def register(self, session: Subscriber) -> None:
        with self.lock:
            self._sessions.add(session)

    def forget(self, session: Subscriber) -> None:
        with self.lock:
            self._sessions.discard(session)
