"""The metadata-store port: a tree of versioned nodes with watches and fenced multi-writes.

Kafka's ZooKeeper mode keeps the cluster's metadata as a tree of znodes (`strom.cluster.zk_paths` lists
them); the controller, the brokers' ISR writes, the ACL and SCRAM credential stores all work on that
tree. `MetadataStore` is the tree as they need it, so the same code runs over a real ZooKeeper
(`strom.cluster.zookeeper_store`, kazoo inside) and over an in-memory tree shared by the sessions of one
process (`strom.cluster.local_store`, optionally persisted to a directory).

Theory of operation (ZooKeeper's model, which both implementations keep):

* **Nodes** have a path (``/a/b``), data (bytes) and a `Stat`: ``version`` (+1 at every set),
  ``ctime_ms``, ``czxid`` (a store-wide counter taken at creation: later creations have larger ones;
  a broker registration's epoch) and ``ephemeral_owner`` (the session that owns an ephemeral node, 0 for
  a persistent one). A node's parent must exist (``make_parents`` creates missing ones, persistent and
  empty). A **sequential** create appends a ten-digit counter kept by the parent to the name.
* **Conditional writes**: ``set`` and ``delete`` take the version the writer read (-1: any) and raise
  `BadVersionError` if it moved. ``multi`` applies a list of `Check`/`Create`/`SetData`/`Delete`
  operations all or nothing; it raises `MultiFailed` naming the first operation that failed. A controller
  starts each multi with a `Check` of ``/controller_epoch``'s version: once another controller has been
  elected (and bumped that version), every write of the deposed one fails.
* **Sessions**: each client is one session. Its ephemeral nodes vanish when the session ends (closed,
  or expired after losing its server for longer than the session timeout). Session events reach
  ``on_state_change`` callbacks on the event loop as `SessionEvent` values.
* **Watches are one-shot**: ``watch_children`` (the children; fires on a child's creation or deletion
  and the node's deletion) and ``watch_data`` (the data, absent or not; fires on creation, change or
  deletion) leave a watch and call the callback once, on the event loop, after the write that fired
  it has been applied, never inside it. The callback must call ``watch_*`` again to re-arm it and read
  the new state, so no change slips between a read and the next watch. A watch that cannot be armed
  (not connected) or that a lost connection dropped is run once the session is connected again, so it
  reads the state it missed and re-arms. ``get_many`` with ``watches`` leaves a data watch on each node
  that exists (as ZooKeeper's getData: none on an absent node).
* **Errors** are the controller's, not a client library's: `NoNodeError`, `NodeExistsError`,
  `BadVersionError`, `NotEmptyError` for refused operations; `MetadataStoreError` (and its
  `NotConnectedError`) when the store cannot be reached or fails unexpectedly. A call never waits for
  a connection: while disconnected it raises `NotConnectedError` at once.
* **Bulk forms** (``get_many``, ``exists_many``, ``multi_many``) answer many nodes in a few round trips
  against ZooKeeper (pipelined requests); for a controller fail-over with thousands of partitions.

Calls are synchronous and made from the event loop (or a worker thread, for the ACL and credential
stores); implementations are thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from strom.cluster.zk_batching import ZkStats

__all__ = [
    "BadVersionError",
    "Check",
    "ControllerMovedError",
    "Create",
    "Delete",
    "MetadataStore",
    "MetadataStoreError",
    "MultiFailed",
    "NoNodeError",
    "NodeExistsError",
    "NotConnectedError",
    "NotEmptyError",
    "Op",
    "OpResult",
    "SessionEvent",
    "SetData",
    "Stat",
    "Watch",
    "parent_of",
]


class MetadataStoreError(Exception):
    """The store could not be reached, or failed an operation in an unexpected way."""


class NotConnectedError(MetadataStoreError):
    """The session is not connected (reconnecting, or closed): nothing was done."""


class NoNodeError(Exception):
    """The node (or, for a create, its parent) does not exist."""


class NodeExistsError(Exception):
    """A create found the node there already."""


class BadVersionError(Exception):
    """A conditional write or check found another version."""


class NotEmptyError(Exception):
    """A delete of a node that has children."""


class ControllerMovedError(Exception):
    """A controller write was fenced: ``/controller_epoch`` moved on; this broker is no longer controller."""


class MultiFailed(Exception):
    """A multi changed nothing: ``ops[index]`` failed with ``cause`` (one of the refusal errors)."""

    def __init__(self, index: int, cause: Exception) -> None:
        super().__init__(f"operation {index} failed: {cause!r}")
        self.index = index
        self.cause = cause


class SessionEvent(enum.StrEnum):
    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost, session alive: reconnecting
    LOST = "LOST"  # session expired: its ephemerals are gone
    RECONNECTED_NEW_SESSION = "RECONNECTED_NEW_SESSION"  # connected again, with a new session


@dataclass(frozen=True, slots=True)
class Stat:
    version: int
    ctime_ms: int
    czxid: int
    ephemeral_owner: int = 0


@dataclass(frozen=True, slots=True)
class Check:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


Op = Check | Create | SetData | Delete
#: Per operation of a successful multi: None (Check, Delete), the created path (Create), the new Stat
#: (SetData).
OpResult = Stat | str | None
Watch = Callable[[], None]


def parent_of(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


class MetadataStore(Protocol):
    """One session on the metadata tree (see the module docstring for the semantics)."""

    stats: ZkStats

    def start(self, timeout_s: float = 15.0) -> None: ...

    def close(self) -> None: ...

    @property
    def session_id(self) -> int: ...

    @property
    def session_state(self) -> str: ...

    def on_state_change(self, callback: Callable[[str], None]) -> None: ...

    # reads -------------------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, Stat]: ...

    def exists(self, path: str) -> Stat | None: ...

    def children(self, path: str) -> list[str]: ...

    # writes ------------------------------------------------------------------------------------------
    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str: ...

    def ensure_path(self, path: str) -> None: ...

    def set(self, path: str, data: bytes, version: int = -1) -> Stat: ...

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None: ...

    def multi(self, ops: Sequence[Op]) -> list[OpResult]: ...

    # watches -----------------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Watch) -> list[str]: ...

    def watch_data(self, path: str, callback: Watch) -> bytes | None: ...

    # bulk --------------------------------------------------------------------------------------------
    def get_many(
        self, paths: Sequence[str], watches: Sequence[Watch] | None = None
    ) -> list[tuple[bytes, Stat] | None]: ...

    def exists_many(self, paths: Sequence[str]) -> list[Stat | None]: ...

    def multi_many(self, batches: Sequence[Sequence[Op]]) -> list[list[OpResult] | MultiFailed]: ...
