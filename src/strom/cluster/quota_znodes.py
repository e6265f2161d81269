"""Client quotas in the metadata store, in Kafka's ZooKeeper-mode config znodes: read all, alter one.

Layout (Kafka's, so ``kafka-configs.sh --zookeeper`` era tools and docs map onto it): a quota entity's
configs live in the config map of

| entity | znode |
|---|---|
| user U | ``/config/users/<U>`` (shared with U's SCRAM credentials) |
| client id C | ``/config/clients/<C>`` |
| user U, client id C | ``/config/users/<U>/clients/<C>`` |

with each name URL-encoded and ``<default>`` standing for the default entity of its type; the data is
``{"version": 1, "config": {"producer_byte_rate": "1048576", ...}}``. An alteration is a read-modify-write
of the entity's znode conditional on the version read (other keys, SCRAM credentials among them, are
kept), retried when another writer came in between; a user's client-id znode gets its user's znode as
parent (created with an empty config when absent). It is then announced as Kafka announces it, a
sequential ``/config/changes/config_change_<seq>`` naming ``users/<U>/clients/<C>`` (or ``users/<U>``,
``clients/<C>``), on which every broker re-reads the quotas (cluster_member.py follows the changes).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Mapping

from strom.cluster import zk_paths as paths
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import (
    BadVersionError,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
)
from strom.quota.entity import DEFAULT, QUOTA_KEYS, Name, QuotaEntity

__all__ = ["CONFIG_CLIENTS", "QuotaZnodeStore", "entity_path"]

CONFIG_CLIENTS = "/config/clients"
_DEFAULT_NODE = "<default>"
_ATTEMPTS = 10


def _node(name: Name) -> str:
    return _DEFAULT_NODE if name is DEFAULT else urllib.parse.quote(str(name), safe="")


def _name(node: str) -> Name:
    return DEFAULT if node == _DEFAULT_NODE else urllib.parse.unquote(node)


def entity_path(entity: QuotaEntity) -> str:
    """The entity's path below ``/config``, as change notifications name it."""
    if entity.user is not None and entity.client_id is not None:
        return f"users/{_node(entity.user)}/clients/{_node(entity.client_id)}"
    if entity.user is not None:
        return f"users/{_node(entity.user)}"
    assert entity.client_id is not None
    return f"clients/{_node(entity.client_id)}"


def _quota_values(config: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(value)
            except ValueError:
                continue  # not a number: written by hand; Kafka would not have stored it
    return out


class QuotaZnodeStore:
    def __init__(self, client: KafkaMetadataClient) -> None:
        self._store = client.store

    def _children(self, path: str) -> list[str]:
        try:
            return self._store.children(path)
        except NoNodeError:
            return []

    def _config(self, path: str) -> tuple[dict[str, str], int]:
        """The znode's config map and version; ({}, -1) when absent."""
        try:
            data, stat = self._store.get(path)
        except NoNodeError:
            return {}, -1
        return (paths.decode_topic_config(bytes(data)) if data else {}), stat.version

    def load_all(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity that has at least one quota, with its quotas."""
        found: dict[QuotaEntity, dict[str, float]] = {}

        def add(entity: QuotaEntity) -> None:
            values = _quota_values(self._config(f"/config/{entity_path(entity)}")[0])
            if values:
                found[entity] = values

        for user_node in self._children(paths.CONFIG_USERS):
            user = _name(user_node)
            add(QuotaEntity(user, None))
            for client_node in self._children(f"{paths.CONFIG_USERS}/{user_node}/clients"):
                add(QuotaEntity(user, _name(client_node)))
        for client_node in self._children(CONFIG_CLIENTS):
            add(QuotaEntity(None, _name(client_node)))
        return found

    def alter(self, entity: QuotaEntity, changes: Mapping[str, float | None]) -> None:
        """Set (None: remove) quota keys of the entity (conditional write, retried), then announce it."""
        path = f"/config/{entity_path(entity)}"
        if entity.user is not None and entity.client_id is not None:
            parent = f"/config/{entity_path(QuotaEntity(entity.user, None))}"
            if self._store.exists(parent) is None:
                with contextlib.suppress(NodeExistsError):  # another writer made it
                    self._store.create(parent, paths.encode_topic_config({}), make_parents=True)
        for _attempt in range(_ATTEMPTS):
            config, version = self._config(path)
            for key, value in changes.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = _format(key, value)
            try:
                if version < 0:
                    self._store.create(path, paths.encode_topic_config(config), make_parents=True)
                else:
                    self._store.set(path, paths.encode_topic_config(config), version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
        else:
            raise MetadataStoreError(f"updating {path} kept racing with other writers")
        self._store.create(
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_entity_change(entity_path(entity)),
            sequential=True,
            make_parents=True,
        )


def _format(key: str, value: float) -> str:
    """As Kafka writes it: a whole number for the LONG byte rates, a double otherwise."""
    return str(int(value)) if QUOTA_KEYS[key] else repr(float(value))
