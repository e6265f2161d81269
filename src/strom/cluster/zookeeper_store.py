"""`MetadataStore` over a real ZooKeeper ensemble (kazoo): the one module of Strom that imports kazoo.

Theory of operation. kazoo runs its own threads: one for the connection and one that delivers watch
and session events. Strom's broker and controller live on one asyncio event loop, so every watch
callback and session change is *bridged* into that loop with ``loop.call_soon_threadsafe``; no Strom
state is ever touched from a kazoo thread. The operations themselves are synchronous kazoo calls made
from the loop: against a ZooKeeper on the local network they take about a millisecond, which keeps the
callers (controller event handlers, ISR changes) simple straight-line code. Work on thousands of
znodes at once (a controller fail-over) uses the bulk forms: ``get_many``/``exists_many`` keep up to
`PIPELINE_WINDOW` asynchronous requests in flight, ``multi_many`` sends independent transactions the
same way, so they wait for a few round trips, not thousands.

A call never waits for a connection: while kazoo is disconnected (it would queue the request until it
reconnects, blocking the whole event loop, so a ZooKeeper outage would freeze every leader) it raises
`NotConnectedError` at once, and a call in flight when the connection drops raises
`MetadataStoreError`. Reconnection attempts back off to at most a third of the session timeout, so a
broker whose ZooKeeper comes back resumes its session instead of finding it expired.

Watches: kazoo drops every watch when the connection drops (firing them with a state-only event); such
callbacks, and those whose arming failed for want of a connection, are kept and run once the client is
connected again, so they read the state they missed and re-arm (the port's rule).

kazoo's refusals (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) are translated into the
port's classes of the same names; a failed transaction into `MultiFailed` naming the operation that
caused it (kazoo answers the others with RolledBackError or RuntimeInconsistency).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType

from strom.cluster.metadata_store import (
    BadVersionError,
    Check,
    Create,
    MetadataStoreError,
    MultiFailed,
    NodeExistsError,
    NoNodeError,
    NotConnectedError,
    NotEmptyError,
    Op,
    OpResult,
    SessionEvent,
    SetData,
    Stat,
    Watch,
)
from strom.cluster.zk_batching import PIPELINE_WINDOW, ZkStats

log = logging.getLogger(__name__)

__all__ = ["BULK_TIMEOUT_S", "ZooKeeperStore"]

#: How long one pipelined batch may take before it counts as a lost connection.
BULK_TIMEOUT_S = 60.0
_READS = frozenset({"get", "get_children", "exists"})
_REFUSALS: dict[type[Exception], type[Exception]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
}
_NOT_THE_CAUSE = (kz.RolledBackError, kz.RuntimeInconsistency)


def _refusal(exc: BaseException) -> Exception | None:
    """The port's error for a kazoo refusal, None if ``exc`` is not one."""
    for kazoo_class, ours in _REFUSALS.items():
        if isinstance(exc, kazoo_class):
            return ours(str(exc))
    return None


def _stat(stat: Any) -> Stat:
    return Stat(int(stat.version), int(stat.ctime), int(stat.czxid), int(stat.ephemeralOwner))


class ZooKeeperStore:
    def __init__(self, connect: str, session_timeout_ms: int, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        session_s = max(session_timeout_ms, 1000) / 1000
        # kazoo's default backoff grows to a minute: far past the session, which then expires needlessly.
        retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": max(0.5, session_s / 3)}
        self._zk = KazooClient(hosts=connect, timeout=session_s, connection_retry=retry)
        self.stats = ZkStats()
        self._state_callbacks: list[Callable[[str], None]] = []
        self._lost = False
        # Watch callbacks to run again once connected (kazoo threads and the loop both touch it).
        self._rearm: list[Watch] = []
        self._rearm_lock = threading.Lock()
        self._zk.add_listener(self._on_state)

    # life cycle ------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 15.0) -> None:
        try:
            self._zk.start(timeout=timeout_s)
        except KazooTimeoutError as exc:
            raise MetadataStoreError(f"cannot connect to ZooKeeper: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._zk.stop()
            self._zk.close()

    @property
    def session_id(self) -> int:
        client_id = self._zk.client_id
        return int(client_id[0]) if client_id else 0

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        """The session id and password, which let a second connection take the session over (as a
        client reconnecting does), or end it; None before the first connection."""
        client_id = self._zk.client_id
        return (int(client_id[0]), bytes(client_id[1])) if client_id else None

    @property
    def session_state(self) -> str:
        """kazoo's connection state: ``CONNECTED``, ``SUSPENDED`` (reconnecting) or ``LOST``."""
        return str(self._zk.state)

    def on_state_change(self, callback: Callable[[str], None]) -> None:
        self._state_callbacks.append(callback)

    def _on_state(self, state: str) -> None:  # kazoo thread
        if state == KazooState.LOST:
            self._lost = True
            event = SessionEvent.LOST
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            event = SessionEvent.RECONNECTED_NEW_SESSION
        else:
            event = SessionEvent(str(state))
        if self._loop.is_closed():
            return
        for cb in self._state_callbacks:
            self._loop.call_soon_threadsafe(cb, str(event))
        if state == KazooState.CONNECTED:
            self._loop.call_soon_threadsafe(self._run_rearm)

    def _defer(self, callback: Watch) -> None:
        """Run ``callback`` once connected again (now, if the connection is already back)."""
        with self._rearm_lock:
            if callback not in self._rearm:
                self._rearm.append(callback)
        if self._zk.connected and not self._loop.is_closed():
            # Connected already (the drop was brief, or the failure was not about the connection):
            # retry shortly, not at once, so a persistent failure cannot spin the loop.
            self._loop.call_soon_threadsafe(self._loop.call_later, 0.5, self._run_rearm)

    def _run_rearm(self) -> None:  # on the loop
        if not self._zk.connected:
            return
        with self._rearm_lock:
            callbacks, self._rearm = self._rearm, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing watch must not keep the others from re-arming
                log.exception("re-arming a ZooKeeper watch failed")

    def _bridge(self, callback: Watch) -> Callable[[Any], None]:
        def fire(event: Any) -> None:  # kazoo thread
            if self._loop.is_closed():
                return
            if getattr(event, "type", None) == EventType.NONE:
                # Not a change: the connection dropped and kazoo discarded the watch.
                self._defer(callback)
            else:
                self._loop.call_soon_threadsafe(callback)

        return fire

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._zk.connected:
            raise NotConnectedError(f"{fn.__name__}{args[:1]}: not connected to ZooKeeper")
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except (kz.KazooException, KazooTimeoutError) as exc:
            refused = _refusal(exc)
            if refused is not None:
                raise refused from exc
            raise MetadataStoreError(f"{fn.__name__}{args[:1]}: {exc!r}") from exc
        finally:
            self.stats.add(fn.__name__ not in _READS, started)

    # reads -------------------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, Stat]:
        data, stat = self._call(self._zk.get, path)
        return bytes(data), _stat(stat)

    def exists(self, path: str) -> Stat | None:
        stat = self._call(self._zk.exists, path)
        return None if stat is None else _stat(stat)

    def children(self, path: str) -> list[str]:
        return list(self._call(self._zk.get_children, path))

    # writes ------------------------------------------------------------------------------------------
    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        return str(
            self._call(
                self._zk.create, path, data, ephemeral=ephemeral, sequence=sequential, makepath=make_parents
            )
        )

    def ensure_path(self, path: str) -> None:
        self._call(self._zk.ensure_path, path)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        return _stat(self._call(self._zk.set, path, data, version))

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        self._call(self._zk.delete, path, version=version, recursive=recursive)

    def _transaction(self, ops: Sequence[Op]) -> Any:
        tx = self._zk.transaction()
        for op in ops:
            if isinstance(op, Check):
                tx.check(op.path, op.version)
            elif isinstance(op, Create):
                tx.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                tx.set_data(op.path, op.data, op.version)
            else:
                tx.delete(op.path, op.version)
        return tx

    @staticmethod
    def _results(results: Sequence[Any]) -> list[OpResult] | MultiFailed:
        failed = [
            (i, r)
            for i, r in enumerate(results)
            if isinstance(r, Exception) and not isinstance(r, _NOT_THE_CAUSE)
        ]
        if failed:
            index, cause = failed[0]
            refused = _refusal(cause)
            if refused is None:
                raise MetadataStoreError(f"a multi failed: {cause!r}")
            return MultiFailed(index, refused)
        if any(isinstance(r, Exception) for r in results):
            raise MetadataStoreError(f"a multi failed without naming an operation: {results!r}")
        return [None if r is True or r is None else (r if isinstance(r, str) else _stat(r)) for r in results]

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        if not self._zk.connected:
            raise NotConnectedError("multi: not connected to ZooKeeper")
        started = time.perf_counter()
        try:
            results = list(self._transaction(ops).commit())
        except (kz.KazooException, KazooTimeoutError) as exc:
            raise MetadataStoreError(f"multi of {len(ops)} operations: {exc!r}") from exc
        finally:
            self.stats.add(True, started, len(ops))
        outcome = self._results(results)
        if isinstance(outcome, MultiFailed):
            raise outcome
        return outcome

    # watches -----------------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Watch) -> list[str]:
        try:
            self._call(self._zk.ensure_path, path)
            return list(self._call(self._zk.get_children, path, watch=self._bridge(callback)))
        except MetadataStoreError:
            self._defer(callback)
            raise

    def watch_data(self, path: str, callback: Watch) -> bytes | None:
        try:
            stat = self._call(self._zk.exists, path, watch=self._bridge(callback))
        except MetadataStoreError:
            self._defer(callback)
            raise
        if stat is None:
            return None
        try:
            data, _ = self._call(self._zk.get, path)
        except NoNodeError:
            return None
        return bytes(data)

    # bulk --------------------------------------------------------------------------------------------
    def _pipelined(
        self, what: str, count: int, submit: Callable[[int], Any], write: bool = False
    ) -> list[Any]:
        """``submit(i)`` for every i < count with up to `PIPELINE_WINDOW` in flight; each answer, or the
        refusal it raised (as the port's error)."""
        if not self._zk.connected:
            raise NotConnectedError(f"{what}: not connected to ZooKeeper")
        found: list[Any] = []
        started = time.perf_counter()
        for start in range(0, count, PIPELINE_WINDOW):
            window = [submit(i) for i in range(start, min(start + PIPELINE_WINDOW, count))]
            for pending in window:
                try:
                    found.append(pending.get(timeout=BULK_TIMEOUT_S))
                except (kz.KazooException, KazooTimeoutError) as exc:
                    refused = _refusal(exc)
                    if refused is None:
                        raise MetadataStoreError(f"{what} ({count} znodes): {exc!r}") from exc
                    found.append(refused)
        self.stats.add(write, started, count)
        return found

    def get_many(
        self, paths: Sequence[str], watches: Sequence[Watch] | None = None
    ) -> list[tuple[bytes, Stat] | None]:
        def submit(i: int) -> Any:
            watch = None if watches is None else self._bridge(watches[i])
            return self._zk.get_async(paths[i], watch=watch)

        return [
            None if isinstance(got, NoNodeError) else (bytes(got[0]), _stat(got[1]))
            for got in self._pipelined("get_many", len(paths), submit)
        ]

    def exists_many(self, paths: Sequence[str]) -> list[Stat | None]:
        found = self._pipelined("exists_many", len(paths), lambda i: self._zk.exists_async(paths[i]))
        return [None if got is None else _stat(got) for got in found]

    def multi_many(self, batches: Sequence[Sequence[Op]]) -> list[list[OpResult] | MultiFailed]:
        found = self._pipelined(
            "multi_many", len(batches), lambda i: self._transaction(batches[i]).commit_async(), True
        )
        return [self._results(results) for results in found]
