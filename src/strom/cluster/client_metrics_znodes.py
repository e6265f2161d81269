"""Client-metrics subscriptions (KIP-714) in the metadata store: ``/config/client-metrics/<name>``, each
``{"version": 1, "config": {name: value}}`` like every config entity, a write followed by a
``/config/changes`` notification naming ``client-metrics/<name>``, on which every broker re-reads them.
(Kafka keeps them in its KRaft metadata log; the layout here follows its other config entities.)"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Mapping

from strom.cluster import zk_paths as paths
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import NoNodeError

__all__ = ["CONFIG_CLIENT_METRICS", "ClientMetricsZnodes"]

CONFIG_CLIENT_METRICS = "/config/client-metrics"


class ClientMetricsZnodes:
    def __init__(self, client: KafkaMetadataClient) -> None:
        self._store = client.store

    def read_all(self) -> dict[str, dict[str, str]]:
        """Every subscription's configs, by name."""
        try:
            children = self._store.children(CONFIG_CLIENT_METRICS)
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
        """Replace a subscription's configs (none: it is removed), then announce the change."""
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
            paths.encode_entity_change(f"client-metrics/{urllib.parse.quote(name, safe='')}"),
            sequential=True,
            make_parents=True,
        )

    @staticmethod
    def _path(name: str) -> str:
        return f"{CONFIG_CLIENT_METRICS}/{urllib.parse.quote(name, safe='')}"
