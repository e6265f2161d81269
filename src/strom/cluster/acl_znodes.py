"""ACLs in the metadata store, in Kafka's ZooKeeper-mode znodes (layouts in strom.acl.zk_format): read,
update, follow changes. The same on a ZooKeeper ensemble and on the local store.

An update is a read-modify-write of one pattern's znode, conditional on the version read (created if
absent, deleted when its last entry goes), retried when another broker wrote in between; it is then
announced with a sequential change node so every broker re-reads that pattern. Each broker watches both
change roots and re-reads the patterns named by children it has not seen yet; the children present at
start are covered by the full load. Change nodes older than 15 minutes are removed by the writer (Kafka
purges them after the same delay).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from strom.acl import zk_format as fmt
from strom.acl.model import AccessControlEntry, AclBinding, PatternType, ResourcePattern, ResourceType
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import (
    BadVersionError,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

log = logging.getLogger(__name__)

Entries = frozenset[AccessControlEntry]
_PURGE_AFTER_S = 15 * 60


class AclZnodeStore:
    def __init__(self, client: KafkaMetadataClient) -> None:
        self._client = client
        self._store = client.store
        self._seen: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        self._on_change: Callable[[ResourcePattern, Entries], None] | None = None
        self._dirty: set[PatternType] = set()
        self._refreshing: asyncio.Task[None] | None = None

    def load_all(self) -> list[AclBinding]:
        found: list[AclBinding] = []
        for kind in (PatternType.LITERAL, PatternType.PREFIXED):
            self._seen[kind].update(self._children(fmt.change_root(kind)))
            for rtype in ResourceType:
                if rtype <= ResourceType.ANY:
                    continue
                for name in self._children(fmt.type_root(kind, rtype)):
                    pattern = ResourcePattern(rtype, name, kind)
                    found += (AclBinding(pattern, e) for e in self.read(pattern))
        return found

    def _children(self, path: str) -> list[str]:
        try:
            return self._store.children(path)
        except NoNodeError:
            return []

    def read(self, pattern: ResourcePattern) -> Entries:
        try:
            data, _ = self._store.get(fmt.pattern_path(pattern))
        except NoNodeError:
            return frozenset()
        return fmt.decode_entries(bytes(data))

    def update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> Entries:
        """Apply `change` to the pattern's stored entries (conditionally, retrying); the new entries."""
        path = fmt.pattern_path(pattern)
        while True:
            try:
                data, stat = self._store.get(path)
                current, version = fmt.decode_entries(bytes(data)), stat.version
            except NoNodeError:
                current, version = frozenset(), -1
            wanted = change(current)
            if wanted == current:
                return current
            try:
                if version < 0:
                    self._store.create(path, fmt.encode_entries(wanted), make_parents=True)
                elif wanted:
                    self._store.set(path, fmt.encode_entries(wanted), version)
                else:
                    self._store.delete(path, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another writer got there first: read again
            self._announce(pattern)
            return wanted

    def _announce(self, pattern: ResourcePattern) -> None:
        root = fmt.change_root(pattern.pattern_type)
        self._store.create(
            f"{root}/{fmt.CHANGE_PREFIX}", fmt.encode_change(pattern), sequential=True, make_parents=True
        )
        with contextlib.suppress(MetadataStoreError):
            self._purge(root)

    def _purge(self, root: str) -> None:
        cutoff_ms = (time.time() - _PURGE_AFTER_S) * 1000
        for child in self._children(root):
            stat = self._store.exists(f"{root}/{child}")
            if stat is not None and stat.ctime_ms < cutoff_ms:
                with contextlib.suppress(NoNodeError, NotEmptyError):
                    self._store.delete(f"{root}/{child}")

    def watch(self, on_change: Callable[[ResourcePattern, Entries], None]) -> None:
        """Call `on_change` (on the event loop) with every pattern another broker (or this one) changes
        and its entries now. At start the change roots are read at once; after that each watch event
        re-reads in a worker thread, one at a time: a ZooKeeper round trip must not hold the event loop
        (ZooKeeper may be slow or paused, and every request waits behind the loop)."""
        self._on_change = on_change
        for kind in (PatternType.LITERAL, PatternType.PREFIXED):
            for pattern, entries in self._changed(kind):
                on_change(pattern, entries)

    def _fired(self, kind: PatternType) -> None:
        self._dirty.add(kind)
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        while self._dirty:
            kind = self._dirty.pop()
            for pattern, entries in await asyncio.to_thread(self._changed, kind):
                if self._on_change is not None:
                    self._on_change(pattern, entries)

    def _changed(self, kind: PatternType) -> list[tuple[ResourcePattern, Entries]]:
        """Re-arm the watch on ``kind``'s change root; the patterns its new children name, read."""
        root = fmt.change_root(kind)
        try:
            children = self._store.watch_children(root, lambda: self._fired(kind))
        except MetadataStoreError:
            return []  # re-armed by the client once connected again
        # Forget purged notifications, so the set stays as small as the change root.
        self._seen[kind] &= set(children)
        changed = []
        for child in sorted(set(children) - self._seen[kind]):
            self._seen[kind].add(child)
            try:
                data, _ = self._store.get(f"{root}/{child}")
                pattern = fmt.decode_change(kind, bytes(data))
                changed.append((pattern, self.read(pattern)))
            except (NoNodeError, MetadataStoreError):
                continue
            except (ValueError, KeyError):
                log.warning("ignoring malformed ACL change notification %s/%s", root, child)
        return changed
