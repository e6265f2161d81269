"""Where SCRAM credentials live: salted and iterated as Kafka stores them, never the password.

`LocalCredentialStore` (a single node) keeps ``scram-credentials.json`` in the first log dir, written
atomically (temporary file, fsync, rename): ``{"users": {"<name>": {"SCRAM-SHA-256": "salt=...,
stored_key=...,server_key=...,iterations=4096"}}}``, the same per-mechanism text Kafka keeps in
ZooKeeper under ``/config/users/<name>``. A ZooKeeper cluster uses `strom.cluster`'s store of that
znode instead (cluster_member.py), so every broker sees every change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from strom.broker.security.scram import ScramCredential


class CredentialStore(Protocol):
    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def describe(self) -> dict[str, dict[str, int]]:
        """user -> mechanism -> iterations."""
        ...

    def alter(
        self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> None: ...


class LocalCredentialStore:
    FILE = "scram-credentials.json"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._path = Path(directory) / self.FILE
        self._users: dict[str, dict[str, str]] = {}
        if self._path.exists():
            self._users = dict(json.loads(self._path.read_text())["users"])

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self._users.get(user, {}).get(mechanism)
        return None if text is None else ScramCredential.from_kafka(text)

    def describe(self) -> dict[str, dict[str, int]]:
        return {
            user: {mech: ScramCredential.from_kafka(text).iterations for mech, text in mechs.items()}
            for user, mechs in self._users.items()
        }

    def alter(
        self, upserts: list[tuple[str, str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> None:
        users = {user: dict(mechs) for user, mechs in self._users.items()}
        for user, mechanism in deletions:
            users.get(user, {}).pop(mechanism, None)
        for user, mechanism, credential in upserts:
            users.setdefault(user, {})[mechanism] = credential.to_kafka()
        users = {user: mechs for user, mechs in users.items() if mechs}
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as out:
            json.dump({"version": 1, "users": users}, out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, self._path)
        self._users = users
