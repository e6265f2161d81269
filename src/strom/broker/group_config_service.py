"""The GROUP config resource (type 32) on a broker: each group's own configs (KIP-848, KIP-932).

Theory of operation. A group's overrides live in the metadata store (``/config/groups/<group>``,
`strom.cluster.client_metrics_znodes.ConfigEntityZnodes`, like every config entity): an
IncrementalAlterConfigs or AlterConfigs validates them (`strom.coordinator.group_configs.check`:
INVALID_CONFIG for an unknown name or a value outside the broker's bounds), writes them and announces
the change; every broker re-reads them on the notification (`view`, an `EntityView`), this one at once.
What uses a group's values reads them at each use (`value`, `share_config`, the heartbeat intervals
and session timeouts), so a change applies without a restart: a share-partition's leader takes
the lock duration at the next acquisition, the delivery-count limit at the next use of the
share-partition and ``share.auto.offset.reset`` when it starts a partition with nothing stored; the
group's coordinator (of a share group or a KIP-848 consumer group) gives the heartbeat interval in the
next heartbeat answer and arms each member's session with the session timeout at its next heartbeat
(a classic member of a consumer group keeps its own, from its JoinGroup).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from strom.broker.config_entities import off_loop
from strom.broker.control.entity_view import EntityView
from strom.broker.replication.share_partitions import ShareConfig
from strom.cluster.client_metrics_znodes import ConfigEntityZnodes
from strom.coordinator import group_configs
from strom.coordinator.group_configs import BrokerGetter

log = logging.getLogger(__name__)

__all__ = ["GroupConfigs"]


class GroupConfigs:
    def __init__(self, store: ConfigEntityZnodes, broker: BrokerGetter) -> None:
        self._store = store
        self._broker = broker
        self.overrides: dict[str, dict[str, str]] = {}
        self.view = EntityView(store.read_all, self._replace)

    def _replace(self, found: dict[str, dict[str, str]]) -> None:
        self.overrides = found

    def value(self, group_id: str, name: str) -> str:
        return group_configs.value(self.overrides.get(group_id, {}), self._broker, name)

    def share_config(self, group_id: str, base: ShareConfig) -> ShareConfig:
        """The leader's share settings for the group: ``base`` (the broker's) with the group's own."""
        if group_id not in self.overrides:
            return base
        return dataclasses.replace(
            base,
            record_lock_duration_ms=int(self.value(group_id, "share.record.lock.duration.ms")),
            delivery_count_limit=int(self.value(group_id, "share.delivery.count.limit")),
            auto_offset_reset=self.value(group_id, "share.auto.offset.reset"),
        )

    def share_heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.value(group_id, "share.heartbeat.interval.ms"))

    def share_session_timeout_ms(self, group_id: str) -> int:
        return int(self.value(group_id, "share.session.timeout.ms"))

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.value(group_id, "consumer.heartbeat.interval.ms"))

    def consumer_session_timeout_ms(self, group_id: str) -> int:
        return int(self.value(group_id, "consumer.session.timeout.ms"))

    # --- the config resource -------------------------------------------------------------------
    async def read(self, group_id: str) -> dict[str, str]:
        return await off_loop(lambda: self._store.read(group_id))

    async def alter(
        self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
    ) -> None:
        """Apply ``change`` to the group's overrides (an empty value removes one).

        Raises:
            KafkaError: INVALID_CONFIG, or REQUEST_TIMED_OUT when the metadata store does not answer.
        """
        current = await self.read(group_id)
        wanted = {k: v for k, v in change(dict(current)).items() if v != ""}
        group_configs.check(wanted, self._broker)
        if validate_only or wanted == current:
            return
        await off_loop(lambda: self._store.write(group_id, wanted))
        await self.view.refresh()
        log.info("group %s configs set to %s", group_id, wanted)
