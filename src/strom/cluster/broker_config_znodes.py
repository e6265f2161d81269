"""Dynamic broker configs in the metadata store (KIP-226), in Kafka's ZooKeeper-mode layout:
``/config/brokers/<id>`` for one broker and ``/config/brokers/<default>`` for all, each
``{"version": 1, "config": {name: value}}``, a write followed by a ``/config/changes`` notification
naming ``brokers/<id>`` (or ``brokers/<default>``) on which every broker re-reads them."""

from __future__ import annotations

from collections.abc import Mapping

from strom.cluster import zk_paths as paths
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import NoNodeError

__all__ = ["CONFIG_BROKERS", "DEFAULT_ENTITY", "BrokerConfigZnodes"]

CONFIG_BROKERS = "/config/brokers"
DEFAULT_ENTITY = "<default>"  # the znode of the cluster-wide default (the BROKER resource named "")


class BrokerConfigZnodes:
    def __init__(self, client: KafkaMetadataClient) -> None:
        self._store = client.store

    def read(self, entity: str) -> dict[str, str]:
        """The dynamic configs of a broker id or ``<default>`` (empty when none)."""
        try:
            data, _ = self._store.get(f"{CONFIG_BROKERS}/{entity}")
        except NoNodeError:
            return {}
        return paths.decode_topic_config(bytes(data)) if data else {}

    def write(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace the entity's dynamic configs, then announce the change."""
        path = f"{CONFIG_BROKERS}/{entity}"
        data = paths.encode_topic_config(dict(configs))
        try:
            self._store.set(path, data)
        except NoNodeError:
            self._store.create(path, data, make_parents=True)
        self._store.create(
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_entity_change(f"brokers/{entity}"),
            sequential=True,
            make_parents=True,
        )
