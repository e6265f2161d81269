"""A `KafkaMetadataClient` over the local metadata store, for tests of the stores built on it (ACLs, SCRAM
credentials): optionally persisted in a directory, like a single node's first log dir."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.local_store import LocalStore


def local_client(directory: Path | str | None = None) -> tuple[KafkaMetadataClient, LocalStore]:
    """A started client on a new session of a new `LocalStore` (close the store when done). Its watches
    would run on a loop of its own, which these tests never run: they read the store directly."""
    store = LocalStore(None if directory is None else str(directory))
    client = KafkaMetadataClient(store.session(asyncio.new_event_loop()))
    client.start()
    return client, store
