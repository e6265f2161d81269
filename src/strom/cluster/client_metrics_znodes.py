"""Client-metrics subscriptions (KIP-714) in the metadata store: ``/config/client-metrics/<name>``, each
``{"version": 1, "config": {name: value}}`` like every config entity, a write followed by a
``/config/changes`` notification naming ``client-metrics/<name>``, on which every broker re-reads them.
(Kafka keeps them in its KRaft metadata log; the layout here follows its other config entities.)
Groups' configs (KIP-848, KIP-932: the GROUP config resource) are kept the same way under
``/config/groups/<group>`` (`ConfigEntityZnodes` with ``CONFIG_GROUPS``)."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Mapping

from strom.cluster import zk_paths as paths
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import NoNodeError

__all__ = ["CONFIG_CLIENT_METRICS", "CONFIG_GROUPS", "ClientMetricsZnodes", "ConfigEntityZnodes"]

CONFIG_CLIENT_METRICS = "/config/client-metrics"
CONFIG_GROUPS = "/config/groups"


class ConfigEntityZnodes:
    """The config entities under ``root`` (``/config/<entity type>``), each named by its child znode."""

    def __init__(self, client: KafkaMetadataClient, root: str) -> None:
        self._store = client.store
        self._root = root
        self._entity_type = root.rsplit("/", 1)[1]

    def read_all(self) -> dict[str, dict[str, str]]:
        """Every entity's configs, by name."""
        try:
            children = self._store.children(self._root)
        except NoNodeError:
            return {}
        return {urllib.parse.unquote(child): self.read(urllib.parse.unquote(child)) for child in children}

    def read(self, name: str) -> dict[str, str]:
        try:
            data, _ = self._store.get(self._path(name))
        except NoNodeError:
            return {}
        return paths.decode_topic_config(bytes(data)) if data else {}

    def write(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace an entity's configs (none: it is removed), then announce the change."""
        path = self._path(name)
        if configs:
            data = paths.encode_topic_config(dict(configs))
            try:
                self._store.set(path, data)
            except NoNodeError:
                self._store.create(path, data, make_parents=True)
        else:
            with contextlib.suppress(NoNodeError):
                self._store.delete(path)
        self._store.create(
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_entity_change(f"{self._entity_type}/{urllib.parse.quote(name, safe='')}"),
            sequential=True,
            make_parents=True,
        )

    def _path(self, name: str) -> str:
        return f"{self._root}/{urllib.parse.quote(name, safe='')}"


class ClientMetricsZnodes(ConfigEntityZnodes):
    def __init__(self, client: KafkaMetadataClient) -> None:
        super().__init__(client, CONFIG_CLIENT_METRICS)
