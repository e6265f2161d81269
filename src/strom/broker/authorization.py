"""The broker's authorizer: ACLs from a store, decisions for request handlers, the ACL admin APIs' work.

``authorizer.class.name`` turns it on (Kafka's ``kafka.security.authorizer.AclAuthorizer`` or
``org.apache.kafka.metadata.authorizer.StandardAuthorizer``; both mean Kafka's ACL rules here); without
it `Broker.authorizer` is None and handlers skip every check with one attribute test.

The bindings live in an `AclStore`: Kafka's ACL znodes in the metadata store (strom.cluster.acl_znodes),
shared by every broker through change notifications: ZooKeeper in a cluster, the local store on a single
node (whose former ``acls.json`` is imported once, strom.broker.control.catalogue_import).
The decision itself is strom.acl.authorizer's, over an in-memory `AclSet` kept up to date from the store.

CreateAcls and DeleteAcls write the store in a worker thread (``asyncio.to_thread``): a ZooKeeper write
waits for a round trip (a local one for an fsync), and for as long as ZooKeeper is slow or paused; on the
event loop that wait would stall every connection of the broker. One write at a time (a lock), and the
in-memory set is changed on the loop once the store has the change, so decisions never see a half-applied
one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from functools import partial
from typing import Protocol

from strom.acl.authorizer import AclSet, authorize, authorize_any, parse_super_users
from strom.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
    invalid_binding,
)
from strom.cluster.metadata_store import MetadataStoreError

AUTHORIZER_CLASSES = frozenset(
    {"kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
)

Entries = frozenset[AccessControlEntry]


def check_authorizer_class(raw: str) -> str:
    name = raw.strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise ValueError(
            f"unsupported authorizer {name!r}; use one of {', '.join(sorted(AUTHORIZER_CLASSES))}"
        )
    return name


class AclStoreUnavailable(Exception):
    """The store could not be read or written (ZooKeeper unreachable); the change may be partial."""


class AclStore(Protocol):
    def load_all(self) -> list[AclBinding]: ...
    def read(self, pattern: ResourcePattern) -> Entries: ...
    def update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> Entries: ...
    def watch(self, on_change: Callable[[ResourcePattern, Entries], None]) -> None: ...


class Authorizer:
    """Kafka's AclAuthorizer over a store: decisions for handlers, and CreateAcls/DescribeAcls/DeleteAcls."""

    def __init__(self, store: AclStore, super_users: str | None, allow_if_no_acl: bool) -> None:
        self._store = store
        self.super_users = parse_super_users(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.acls = AclSet(store.load_all())
        self._writing = asyncio.Lock()  # one store write at a time, off the event loop

    def start(self) -> None:
        self._store.watch(self._reload)

    def _reload(self, pattern: ResourcePattern, entries: Entries) -> None:
        self.acls.set_entries(pattern, entries)

    def allowed(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return authorize(
            self.acls,
            principal,
            host,
            operation,
            resource_type,
            name,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )

    def allowed_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Allowed `operation` on some resource of the type (KIP-679's idempotent-producer rule)."""
        return authorize_any(
            self.acls,
            principal,
            host,
            operation,
            resource_type,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )

    # the ACL admin APIs ---------------------------------------------------------------------------
    async def create(self, bindings: Iterable[AclBinding]) -> list[str | None]:
        """Store each binding; per binding None, or why it was refused (INVALID_REQUEST)."""
        results: list[str | None] = []
        for binding in bindings:
            reason = invalid_binding(binding)
            if reason is None:
                await self._update(binding.pattern, partial(_add, binding.entry))
            results.append(reason)
        return results

    async def _update(self, pattern: ResourcePattern, change: Callable[[Entries], Entries]) -> Entries:
        async with self._writing:
            try:
                after = await asyncio.to_thread(self._store.update, pattern, change)
            except (MetadataStoreError, OSError) as exc:
                raise AclStoreUnavailable(str(exc)) from exc
        self.acls.set_entries(pattern, after)
        return after

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.acls.bindings() if acl_filter.matches(b)]

    async def delete(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove every binding the filter matches; the removed bindings."""
        removed: list[AclBinding] = []
        for pattern in list(self.acls.patterns()):  # a copy: the set may change while a write waits
            doomed = frozenset(
                e for e in self.acls.entries(pattern) if acl_filter.matches(AclBinding(pattern, e))
            )
            if not doomed:
                continue
            after = await self._update(pattern, partial(_remove, doomed))
            removed += (AclBinding(pattern, e) for e in doomed if e not in after)
        return removed


def _add(entry: AccessControlEntry, current: Entries) -> Entries:
    return current | {entry}


def _remove(doomed: Entries, current: Entries) -> Entries:
    return current - doomed
