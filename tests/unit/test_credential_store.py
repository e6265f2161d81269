"""The single node's SCRAM credential file: owner-only, rewritten atomically, read back on open."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from strom.broker.security.credentials import LocalCredentialStore
from strom.broker.security.scram import ScramCredential


def test_local_store_file_is_owner_only_and_reloads(tmp_path: Path) -> None:
    credential = ScramCredential(b"salt", b"s" * 32, b"k" * 32, 4096)
    store = LocalCredentialStore(tmp_path)
    asyncio.run(store.alter([("alice", "SCRAM-SHA-256", credential)], []))
    path = tmp_path / LocalCredentialStore.FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))
    reopened = LocalCredentialStore(tmp_path)
    assert reopened.get("alice", "SCRAM-SHA-256") == credential
    assert reopened.describe() == {"alice": {"SCRAM-SHA-256": 4096}}
    asyncio.run(reopened.alter([], [("alice", "SCRAM-SHA-256")]))
    assert LocalCredentialStore(tmp_path).describe() == {}
