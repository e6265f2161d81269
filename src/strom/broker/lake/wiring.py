"""Building the Iceberg translator from the broker's settings, once a hosted topic needs it.

pyiceberg and pyarrow are imported only then: a broker none of whose topics has ``strom.iceberg.mode``
never loads them. `LakeHost.run` looks for such a topic every translation interval; the first one found
builds the translator (strom.broker.lake.translator) and runs it for the broker's life.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from strom._util.clock import Clock, sleep_ms
from strom.broker.config import BrokerConfig
from strom.broker.replication.partition import Partition
from strom.broker.tiered.config_defs import RSM_PREFIX, plugin_settings
from strom.lake.config_defs import LAKE_CONFIGS, PROPERTY_PREFIX, catalog_settings
from strom.storage.config import LogConfig

if TYPE_CHECKING:
    from strom.broker.lake.translator import IcebergTranslator
    from strom.lake.tables import LakeTables
    from strom.lake.translate import ProtobufLookup, SchemaLookup

log = logging.getLogger(__name__)


class LakeHost:
    def __init__(
        self,
        config: BrokerConfig,
        partitions: Callable[[], list[Partition]],
        log_config_for: Callable[[str], LogConfig],
        schema_lookup: SchemaLookup,
        clock: Clock,
        topic_id_of: Callable[[str], bytes | None],
        protobuf_lookup: ProtobufLookup | None = None,
    ) -> None:
        self._settings = {name: str(config.get(name)) for name, *_ in LAKE_CONFIGS}
        # Checked now, so that a wrong setting stops the broker at start-up rather than at first use.
        self.catalog = catalog_settings(
            self._settings,
            config.log_dirs[0],
            plugin_settings(config.plugin_settings, RSM_PREFIX),
            plugin_settings(config.plugin_settings, PROPERTY_PREFIX),
        )
        self._partitions = partitions
        self._log_config_for = log_config_for
        self._schema_lookup = schema_lookup
        self._clock = clock
        self._topic_id_of = topic_id_of
        self._protobuf_lookup = protobuf_lookup
        self.interval_ms = max(int(self._settings["strom.iceberg.translation.interval.ms"]), 10)
        self.backlog_ms = int(self._settings["strom.iceberg.translation.backlog.ms"])
        self.translator: IcebergTranslator | None = None

    def _needed(self) -> bool:
        return any(
            self._log_config_for(p.topic).strom_iceberg_mode != "disabled"
            for p in self._partitions()
            if p.is_leader
        )

    async def run(self) -> None:
        """Wait for a led partition of an Iceberg topic, then run the translator (cancelled at shutdown)."""
        while not self._needed():
            await sleep_ms(self._clock, self.interval_ms)
        # pyiceberg and pyarrow take a second or more to import: in a worker thread, not on the loop.
        translator_class, tables_class = await asyncio.to_thread(_import_lake)
        self.translator = translator_class(
            self._partitions,
            self._log_config_for,
            self._schema_lookup,
            tables_class(self.catalog),
            self._clock,
            self.interval_ms,
            self._topic_id_of,
            self._protobuf_lookup,
            self.backlog_ms,
        )
        log.info(
            "iceberg translator started (%s catalog at %s)", self.catalog.kind, self.catalog.properties["uri"]
        )
        await self.translator.run()


def _import_lake() -> tuple[type[IcebergTranslator], type[LakeTables]]:
    from strom.broker.lake.translator import IcebergTranslator
    from strom.lake.tables import LakeTables

    return IcebergTranslator, LakeTables
