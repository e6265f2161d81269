"""Where SCRAM credentials live: salted and iterated as Kafka stores them, never the password.

`ZkCredentialStore` keeps them as Kafka keeps them in ZooKeeper, under ``/config/users/<name>`` of the
metadata store (ZooKeeper in a cluster, the local store on a single node, whose former
``scram-credentials.json`` is imported once, strom.broker.control.catalogue_import): the per-mechanism text
``salt=...,stored_key=...,server_key=...,iterations=4096`` in that znode (read-modify-write: quotas share
its map), then posts a config change notification (``users/<name>``); every broker caches the credentials
and reloads a user when notified (cluster_member.py watches the notifications), so a user created through
one broker logs in on all. `ZkCredentialStore.alter` (AlterUserScramCredentials) writes ZooKeeper from a
worker thread, never waiting for ZooKeeper on the event loop, and updates the cache on the loop once the
write is done.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from strom.broker.security.scram import HASHES, ScramCredential


class CredentialStore(Protocol):
    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def describe(self) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations."""
        ...

    async def alter(
        self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> None: ...


class _CachedCredentials:
    """Lookups over the in-memory copy both stores keep: user -> mechanism -> Kafka's credential text."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, str]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self._users.get(user, {}).get(mechanism)
        return None if text is None else ScramCredential.from_kafka(text)

    def describe(self) -> dict[str, dict[str, int]]:
        return {
            user: {mech: ScramCredential.from_kafka(text).iterations for mech, text in mechs.items()}
            for user, mechs in self._users.items()
        }


class UserConfigZk(Protocol):
    """The metadata-store operations the credential store uses (`KafkaMetadataClient`'s)."""

    def get_user_config(self, user: str) -> dict[str, str]: ...

    def list_config_users(self) -> list[str]: ...

    def update_user_config(self, user: str, changes: dict[str, str | None]) -> None: ...


class ZkCredentialStore(_CachedCredentials):
    def __init__(self, zk: UserConfigZk) -> None:
        super().__init__()
        self._zk = zk
        for user in zk.list_config_users():
            self._cache(user, zk.get_user_config(user))  # a starting broker: not serving yet

    async def refresh(self, user: str) -> None:
        """Re-read one user's credentials (on a change notification; the read off the loop)."""
        self._cache(user, await asyncio.to_thread(self._zk.get_user_config, user))

    def _cache(self, user: str, config: dict[str, str]) -> None:
        mechs = {k: v for k, v in config.items() if k in HASHES}
        if mechs:
            self._users[user] = mechs
        else:
            self._users.pop(user, None)

    def _write(self, user: str, change: dict[str, str | None]) -> dict[str, str]:
        """In a worker thread: the conditional write and notification, then the user's config as stored."""
        self._zk.update_user_config(user, change)
        return self._zk.get_user_config(user)

    async def alter(
        self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> None:
        changes: dict[str, dict[str, str | None]] = {}
        for user, mechanism in deletions:
            changes.setdefault(user, {})[mechanism] = None
        for user, mechanism, credential in upserts:
            changes.setdefault(user, {})[mechanism] = credential.to_kafka()
        for user, change in changes.items():
            self._cache(user, await asyncio.to_thread(self._write, user, change))
