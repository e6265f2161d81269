"""SCRAM credentials in the metadata store (``/config/users/<name>``, Kafka's text per mechanism): written,
read back after the store is reopened from its directory, deleted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.metadata_clients import local_client

from strom.broker.security.credentials import ZkCredentialStore
from strom.broker.security.scram import ScramCredential


def test_credentials_survive_a_reopen_and_go_when_deleted(tmp_path: Path) -> None:
    credential = ScramCredential(b"salt", b"s" * 32, b"k" * 32, 4096)
    client, store = local_client(tmp_path)
    asyncio.run(ZkCredentialStore(client).alter([("alice", "SCRAM-SHA-256", credential)], []))
    assert client.get_user_config("alice") == {"SCRAM-SHA-256": credential.to_kafka()}
    store.close()
    client, store = local_client(tmp_path)
    reopened = ZkCredentialStore(client)
    assert reopened.get("alice", "SCRAM-SHA-256") == credential
    assert reopened.describe() == {"alice": {"SCRAM-SHA-256": 4096}}
    asyncio.run(reopened.alter([], [("alice", "SCRAM-SHA-256")]))
    assert ZkCredentialStore(client).describe() == {}
    store.close()
