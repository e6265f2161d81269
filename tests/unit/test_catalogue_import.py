"""A single node's data dir in the former format (tests/former_catalogue.py) is imported into the local
metadata store on the first start, read back through the Kafka-shaped client, persisted in the store's
own files, and not imported a second time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.former_catalogue import CLUSTER_ID, TOPIC_ID, write_former_catalogue

from strom.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.broker.control.catalogue_import import import_legacy_catalogue
from strom.cluster.acl_znodes import AclZnodeStore
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.local_store import LocalStore

NODE = 3
BINDING = AclBinding(
    ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
)


def test_the_former_files_are_imported_once_and_persisted(tmp_path: Path) -> None:
    async def scenario() -> None:
        credential = write_former_catalogue(tmp_path, NODE)
        loop = asyncio.get_running_loop()
        store = LocalStore(str(tmp_path))
        client = KafkaMetadataClient(store.session(loop))
        client.start()
        assert import_legacy_catalogue(tmp_path, NODE, client)
        assert client.get_topics() == ["orders"]
        found = client.get_topic_assignment("orders")
        assert found is not None
        assignment, _ = found
        assert assignment.topic_id == TOPIC_ID and assignment.partitions == {p: [NODE] for p in range(4)}
        assert client.get_topic_config("orders") == {"retention.ms": "2000"}
        for p in range(4):
            state = client.get_partition_state("orders", p)
            assert state is not None and (state.leader, state.leader_epoch, state.isr) == (NODE, 5, (NODE,))
        assert client.allocate_producer_id_block(NODE, 1000) == 2000  # never an id handed out before
        assert AclZnodeStore(client).load_all() == [BINDING]
        assert client.get_user_config("alice") == {"SCRAM-SHA-256": credential}
        assert client.get_or_create_cluster_id("another") == CLUSTER_ID
        assert not import_legacy_catalogue(tmp_path, NODE, client)  # once only
        store.close()
        reopened = LocalStore(str(tmp_path))  # what was imported is in the store's own files now
        again = KafkaMetadataClient(reopened.session(loop))
        assert again.get_topics() == ["orders"]
        assert not import_legacy_catalogue(tmp_path, NODE, again)
        reopened.close()

    asyncio.run(scenario())


def test_an_interrupted_import_runs_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        write_former_catalogue(tmp_path, NODE)
        store = LocalStore(str(tmp_path))
        client = KafkaMetadataClient(store.session(asyncio.get_running_loop()))
        client.start()
        client.store.create("/brokers/topics/orders", b"{}")  # a crash left part of a first attempt
        assert import_legacy_catalogue(tmp_path, NODE, client)
        found = client.get_topic_assignment("orders")
        assert found is not None and len(found[0].partitions) == 4
        store.close()

    asyncio.run(scenario())


def test_a_fresh_data_dir_imports_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = LocalStore(str(tmp_path))
        client = KafkaMetadataClient(store.session(asyncio.get_running_loop()))
        client.start()
        assert not import_legacy_catalogue(tmp_path, NODE, client)
        assert client.get_topics() == []
        store.close()

    asyncio.run(scenario())
