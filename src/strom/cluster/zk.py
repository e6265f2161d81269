"""The one place Strom talks to ZooKeeper (kazoo): Kafka-shaped operations over the znodes of zk_paths.

Theory of operation. kazoo runs its own threads: one for the connection and one that delivers watch
and session events. Strom's broker and controller live on one asyncio event loop, so every watch
callback and session change is *bridged* into that loop with ``loop.call_soon_threadsafe``; no Strom
state is ever touched from a kazoo thread. The operations themselves are synchronous kazoo calls made
from the loop: against a ZooKeeper on the local network they take about a millisecond, which keeps the
callers (controller event handlers, ISR changes) simple straight-line code. Work on thousands of
znodes at once (a controller fail-over) uses the bulk forms instead: pipelined reads and chunked
multi-op writes (`strom.cluster.zk_partitions`), so it waits for a few round trips, not thousands.
A call never waits for a
connection: while kazoo is disconnected (it would queue the request until it reconnects, blocking the
whole event loop, so a ZooKeeper outage would freeze every leader) it raises `ZkError` at once, and a
call in flight when the connection drops raises it too. Reconnection attempts back off to at most a third
of the session timeout, so a broker whose ZooKeeper comes back resumes its session instead of finding
it expired.

Watches are one-shot (ZooKeeper's rule): ``watch_children``/``watch_data`` read the node and leave a
watch; when it fires the callback runs on the loop and must call ``watch_*`` again to re-arm it and read
the new state, so no change can slip between a read and the next watch. kazoo drops every watch when
the connection drops (firing them with a state-only event); such callbacks, and those whose re-arming
failed for want of a connection, are kept and run once the client is connected again, so they read the
state they missed and re-arm.

Fencing: partition-state writes take the version the writer read (conditional set); the controller's
writes additionally check, in the same ZooKeeper transaction, that ``/controller_epoch`` still has the
version this controller wrote when it was elected, so a deposed controller can change nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType

from strom.cluster import zk_paths as paths
from strom.cluster.zk_batching import ZkStats
from strom.cluster.zk_errors import ControllerMovedError, ZkError
from strom.cluster.zk_partitions import PartitionStateOps
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["ControllerMovedError", "KafkaZkClient", "ZkError"]


Callback = Callable[[], None]
_READS = frozenset({"get", "get_children", "exists"})


class KafkaZkClient(PartitionStateOps):
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
        self._rearm: list[Callback] = []
        self._rearm_lock = threading.Lock()
        self._zk.add_listener(self._on_state)

    # life cycle ------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 15.0) -> None:
        try:
            self._zk.start(timeout=timeout_s)
        except KazooTimeoutError as exc:
            raise ZkError(f"cannot connect to ZooKeeper: {exc}") from exc
        for path in paths.PERSISTENT_PATHS:
            self._call(self._zk.ensure_path, path)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._zk.stop()
            self._zk.close()

    @property
    def session_state(self) -> str:
        """kazoo's connection state: ``CONNECTED``, ``SUSPENDED`` (reconnecting) or ``LOST``."""
        return str(self._zk.state)

    def on_state_change(self, callback: Callable[[str], None]) -> None:
        """``callback("LOST" | "RECONNECTED_NEW_SESSION" | "SUSPENDED" | "CONNECTED")`` on the loop."""
        self._state_callbacks.append(callback)

    def _on_state(self, state: str) -> None:  # kazoo thread
        if state == KazooState.LOST:
            self._lost = True
            event = "LOST"
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            event = "RECONNECTED_NEW_SESSION"
        else:
            event = str(state)
        if self._loop.is_closed():
            return
        for cb in self._state_callbacks:
            self._loop.call_soon_threadsafe(cb, event)
        if state == KazooState.CONNECTED:
            self._loop.call_soon_threadsafe(self._run_rearm)

    def _defer(self, callback: Callback) -> None:
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

    def _bridge(self, callback: Callback) -> Callable[[Any], None]:
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
            raise ZkError(f"{fn.__name__}{args[:1]}: not connected to ZooKeeper")
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError):
            raise
        except (KazooException, KazooTimeoutError) as exc:
            raise ZkError(f"{fn.__name__}{args[:1]}: {exc!r}") from exc
        finally:
            self.stats.add(fn.__name__ not in _READS, started)

    def op(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A kazoo operation by name behind the connection guard (for modules such as zk_acls.py)."""
        return self._call(getattr(self._zk, name), *args, **kwargs)

    # watches ---------------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Callback) -> list[str]:
        try:
            self._call(self._zk.ensure_path, path)
            return list(self._call(self._zk.get_children, path, watch=self._bridge(callback)))
        except ZkError:
            self._defer(callback)
            raise

    def watch_data(self, path: str, callback: Callback) -> bytes | None:
        """The node's data (None if absent), leaving a watch for its creation, change or deletion."""
        try:
            stat = self._call(self._zk.exists, path, watch=self._bridge(callback))
        except ZkError:
            self._defer(callback)
            raise
        if stat is None:
            return None
        try:
            data, _ = self._call(self._zk.get, path)
        except NoNodeError:
            return None
        return bytes(data)

    # cluster id ------------------------------------------------------------------------------------
    def get_or_create_cluster_id(self, candidate: str) -> str:
        try:
            self._call(self._zk.create, paths.CLUSTER_ID, paths.encode_cluster_id(candidate))
            return candidate
        except NodeExistsError:
            data, _ = self._call(self._zk.get, paths.CLUSTER_ID)
            return paths.decode_cluster_id(data)

    # brokers ---------------------------------------------------------------------------------------
    def register_broker(self, registration: BrokerRegistration) -> None:
        """Create the ephemeral ``/brokers/ids/<id>``; a live broker with the same id is an error."""
        path = paths.broker_path(registration.broker_id)
        for _attempt in range(3):
            try:
                self._call(self._zk.create, path, registration.encode(), ephemeral=True)
                return
            except NodeExistsError:
                try:
                    _, stat = self._call(self._zk.get, path)
                except NoNodeError:
                    # The previous owner's session expired between our create and get: create again.
                    continue
                if stat.ephemeralOwner != self._zk.client_id[0]:
                    raise ZkError(f"broker id {registration.broker_id} is already registered") from None
                return
        raise ZkError(f"registering broker {registration.broker_id} kept racing with another owner")

    def get_brokers(self) -> dict[int, BrokerRegistration]:
        found: dict[int, BrokerRegistration] = {}
        for child in self._call(self._zk.get_children, paths.BROKER_IDS):
            with contextlib.suppress(NoNodeError, ValueError, KeyError):
                data, stat = self._call(self._zk.get, f"{paths.BROKER_IDS}/{child}")
                reg = BrokerRegistration.decode(int(child), data)
                found[int(child)] = dataclasses.replace(reg, epoch=stat.czxid)
        return found

    # controller ------------------------------------------------------------------------------------
    def get_controller_id(self) -> int:
        try:
            data, _ = self._call(self._zk.get, paths.CONTROLLER)
            return paths.decode_controller(data)
        except (NoNodeError, ValueError, KeyError):
            return -1

    def try_become_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Create ephemeral ``/controller``; on success bump ``/controller_epoch``.

        Returns (controller epoch, znode version of /controller_epoch) or None if another broker won.
        """
        try:
            self._call(self._zk.create, paths.CONTROLLER, paths.encode_controller(broker_id), ephemeral=True)
        except NodeExistsError:
            return None
        while True:
            try:
                data, stat = self._call(self._zk.get, paths.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self._call(self._zk.create, paths.CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int(data.decode() or "0") + 1
            try:
                new = self._call(self._zk.set, paths.CONTROLLER_EPOCH, str(epoch).encode(), stat.version)
                return epoch, int(new.version)
            except BadVersionError:
                continue

    def resign_controller(self, broker_id: int) -> None:
        with contextlib.suppress(Exception):
            if self.get_controller_id() == broker_id:
                self._call(self._zk.delete, paths.CONTROLLER)

    # topics ----------------------------------------------------------------------------------------
    def get_topics(self) -> list[str]:
        return sorted(self._call(self._zk.get_children, paths.BROKER_TOPICS))

    def create_topic(self, name: str, assignment: TopicAssignment, configs: dict[str, str]) -> None:
        """Write the configs, then the assignment (which the controller watches), atomically."""
        tx = self._zk.transaction()
        config_path = paths.topic_config_path(name)
        if self._call(self._zk.exists, config_path):
            tx.set_data(config_path, paths.encode_topic_config(configs))
        else:
            tx.create(config_path, paths.encode_topic_config(configs))
        tx.create(paths.topic_path(name), assignment.encode())
        results = self._call(tx.commit)
        for result in results:
            if isinstance(result, NodeExistsError):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
            if isinstance(result, Exception):
                raise ZkError(f"creating topic {name}: {result!r}")

    def get_topic_assignment(self, name: str) -> tuple[TopicAssignment, int] | None:
        try:
            data, stat = self._call(self._zk.get, paths.topic_path(name))
        except NoNodeError:
            return None
        return TopicAssignment.decode(data), int(stat.version)

    def get_topic_assignments(
        self, topics: list[str], on_change: Callable[[str], Callback]
    ) -> dict[str, tuple[TopicAssignment, int] | None]:
        """Every topic's assignment and znode version (None if gone), read with pipelined requests,
        each leaving a data watch that runs ``on_change(topic)`` on the loop."""
        watches = [self._bridge(on_change(topic)) for topic in topics]
        found = self.get_many([paths.topic_path(topic) for topic in topics], watches)
        return {
            topic: None if got is None else (TopicAssignment.decode(got[0]), int(got[1].version))
            for topic, got in zip(topics, found, strict=True)
        }

    def set_topic_assignment(self, name: str, assignment: TopicAssignment, version: int) -> int | None:
        """Conditional write; the new version, or None if someone wrote in between."""
        try:
            stat = self._call(self._zk.set, paths.topic_path(name), assignment.encode(), version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

    def get_topic_config(self, name: str) -> dict[str, str]:
        try:
            data, _ = self._call(self._zk.get, paths.topic_config_path(name))
        except NoNodeError:
            return {}
        return paths.decode_topic_config(data)

    def set_topic_config(self, name: str, configs: dict[str, str]) -> None:
        path = paths.topic_config_path(name)
        try:
            self._call(self._zk.set, path, paths.encode_topic_config(configs))
        except NoNodeError:
            self._call(self._zk.create, path, paths.encode_topic_config(configs), makepath=True)
        self._call(
            self._zk.create,
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_config_change(name),
            sequence=True,
        )

    # SCRAM credentials (Kafka's /config/users/<user>; quotas share the map, so read-modify-write) --
    def get_user_config(self, user: str) -> dict[str, str]:
        try:
            data, _ = self._call(self._zk.get, paths.user_config_path(user))
        except NoNodeError:
            return {}
        return paths.decode_topic_config(data)

    def list_config_users(self) -> list[str]:
        try:
            children = self._call(self._zk.get_children, paths.CONFIG_USERS)
        except NoNodeError:
            return []
        return [urllib.parse.unquote(child) for child in children]

    def update_user_config(self, user: str, changes: dict[str, str | None]) -> None:
        """Set (or, with None, remove) keys of the user's config map, conditionally on its version,
        then post a change notification so every broker reloads it."""
        path = paths.user_config_path(user)
        for _attempt in range(10):
            try:
                data, stat = self._call(self._zk.get, path)
                config, version = paths.decode_topic_config(data), stat.version
            except NoNodeError:
                config, version = {}, -1
            for key, value in changes.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            try:
                if version < 0:
                    self._call(self._zk.create, path, paths.encode_topic_config(config), makepath=True)
                else:
                    self._call(self._zk.set, path, paths.encode_topic_config(config), version=version)
                break
            except (BadVersionError, NodeExistsError):
                continue
        else:
            raise ZkError(f"updating {path} kept racing with other writers")
        self._call(
            self._zk.create,
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_user_change(user),
            sequence=True,
            makepath=True,
        )

    def read_user_change(self, child: str) -> str | None:
        try:
            data, _ = self._call(self._zk.get, f"{paths.CONFIG_CHANGES}/{child}")
        except NoNodeError:
            return None
        return paths.decode_user_change(data)

    def read_config_change(self, child: str) -> str | None:
        try:
            data, _ = self._call(self._zk.get, f"{paths.CONFIG_CHANGES}/{child}")
        except NoNodeError:
            return None
        return paths.decode_config_change(data)

    def mark_topic_for_deletion(self, name: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self._call(self._zk.create, f"{paths.DELETE_TOPICS}/{name}")

    def topics_marked_for_deletion(self) -> list[str]:
        return sorted(self._call(self._zk.get_children, paths.DELETE_TOPICS))

    def delete_topic_znodes(self, name: str) -> None:
        for path in (paths.topic_path(name), paths.topic_config_path(name), f"{paths.DELETE_TOPICS}/{name}"):
            with contextlib.suppress(NoNodeError):
                self._call(self._zk.delete, path, recursive=True)

    # producer ids ----------------------------------------------------------------------------------
    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Claim the next block of producer ids (conditional write, retried); returns its first id."""
        while True:
            try:
                data, stat = self._call(self._zk.get, paths.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self._call(
                        self._zk.create,
                        paths.PRODUCER_ID_BLOCK,
                        paths.encode_producer_id_block(broker_id, 0, size - 1),
                    )
                    return 0
                except NodeExistsError:
                    continue
            start = paths.decode_producer_id_block_end(data) + 1
            try:
                self._call(
                    self._zk.set,
                    paths.PRODUCER_ID_BLOCK,
                    paths.encode_producer_id_block(broker_id, start, start + size - 1),
                    stat.version,
                )
                return start
            except BadVersionError:
                continue
