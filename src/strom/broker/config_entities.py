"""Config entities of the metadata store as request handlers reach them (`HandlerPorts.config_entities`):
client quotas (`strom.cluster.quota_znodes`) and dynamic broker configs
(`strom.cluster.broker_config_znodes`, applied through `strom.broker.control.dynamic_config`).

Each store call runs in a worker thread (a ZooKeeper round trip never blocks the event loop) and the
store's failure becomes what a ZooKeeper-mode Kafka broker answers once its ZooKeeper wait expires:
REQUEST_TIMED_OUT, a retriable error; handlers never see the store's own errors. After a write this
broker applies the change at once (the other brokers when its change notification reaches them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from strom.broker.control.dynamic_config import DynamicBrokerConfig
from strom.cluster.broker_config_znodes import BrokerConfigZnodes
from strom.cluster.metadata_store import MetadataStoreError
from strom.cluster.quota_znodes import QuotaZnodeStore
from strom.protocol.errors import ErrorCode, KafkaError
from strom.quota.entity import QuotaEntity

__all__ = ["ConfigEntities", "off_loop"]

_T = TypeVar("_T")


async def off_loop(call: Callable[[], _T]) -> _T:
    try:
        return await asyncio.to_thread(call)
    except MetadataStoreError as exc:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the metadata store did not answer: {exc}") from None


class ConfigEntities:
    def __init__(
        self,
        quota_store: QuotaZnodeStore,
        broker_config_store: BrokerConfigZnodes,
        dynamic: DynamicBrokerConfig,
        reload_quotas: Callable[[], Awaitable[None]],
        reload_broker_config: Callable[[], Awaitable[None]],
    ) -> None:
        self._quotas = quota_store
        self._broker_configs = broker_config_store
        self.dynamic = dynamic  # this broker's view: static config, its own and the cluster's dynamic values
        self._reload_quotas = reload_quotas
        self._reload_broker_config = reload_broker_config

    async def load_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return await off_loop(self._quotas.load_all)

    async def alter_quotas(self, entity: QuotaEntity, changes: Mapping[str, float | None]) -> None:
        await off_loop(lambda: self._quotas.alter(entity, changes))
        await self._reload_quotas()

    async def read_broker_configs(self, entity: str) -> dict[str, str]:
        return await off_loop(lambda: self._broker_configs.read(entity))

    async def write_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        await off_loop(lambda: self._broker_configs.write(entity, configs))
        await self._reload_broker_config()
