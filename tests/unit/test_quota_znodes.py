"""Client quotas in the metadata store (cluster/quota_znodes.py): Kafka's znodes for users, clients and a
user's clients (defaults as ``<default>``), kept beside a user's SCRAM credentials, announced with a
change notification, and read back after a reopen."""

from __future__ import annotations

from pathlib import Path

from tests.metadata_clients import local_client

from strom.cluster import zk_paths as paths
from strom.cluster.quota_znodes import QuotaZnodeStore, entity_path
from strom.quota.entity import DEFAULT, QuotaEntity


def test_quotas_round_trip_in_kafkas_layout(tmp_path: Path) -> None:
    client, store = local_client(tmp_path)
    quotas = QuotaZnodeStore(client)
    client.update_user_config("alice", {"SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=4096"})
    quotas.alter(QuotaEntity("alice", None), {"producer_byte_rate": 1024.0})
    quotas.alter(QuotaEntity("alice", "app/1"), {"consumer_byte_rate": 2048.0, "request_percentage": 50.0})
    quotas.alter(QuotaEntity(DEFAULT, DEFAULT), {"controller_mutation_rate": 2.5})
    quotas.alter(QuotaEntity(None, DEFAULT), {"producer_byte_rate": 10.0})
    data, _ = client.store.get("/config/users/alice/clients/app%2F1")
    assert paths.decode_topic_config(data) == {"consumer_byte_rate": "2048", "request_percentage": "50.0"}
    assert client.store.exists("/config/users/<default>/clients/<default>") is not None
    assert client.store.exists("/config/clients/<default>") is not None
    # The user's SCRAM credentials are kept; the quota is beside them.
    assert set(client.get_user_config("alice")) == {"SCRAM-SHA-256", "producer_byte_rate"}
    changes = client.store.children(paths.CONFIG_CHANGES)
    announced = sorted(str(client.store.get(f"{paths.CONFIG_CHANGES}/{c}")[0], "utf-8") for c in changes)
    assert any('"entity_path":"clients/<default>"' in a.replace(" ", "") for a in announced)
    assert entity_path(QuotaEntity("alice", "app/1")) == "users/alice/clients/app%2F1"
    quotas.alter(QuotaEntity("alice", "app/1"), {"request_percentage": None})
    store.close()
    client, store = local_client(tmp_path)
    assert QuotaZnodeStore(client).load_all() == {
        QuotaEntity("alice", None): {"producer_byte_rate": 1024.0},
        QuotaEntity("alice", "app/1"): {"consumer_byte_rate": 2048.0},
        QuotaEntity(DEFAULT, DEFAULT): {"controller_mutation_rate": 2.5},
        QuotaEntity(None, DEFAULT): {"producer_byte_rate": 10.0},
    }
    store.close()
