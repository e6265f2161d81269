"""Client telemetry on this broker (KIP-714): the subscriptions configured as CLIENT_METRICS config
resources, the GetTelemetrySubscriptions and PushTelemetry decisions, and the pushed metrics kept for
``/metrics``.

Theory of operation. The subscriptions live in the metadata store (strom.cluster.client_metrics_znodes),
so every broker knows them: this one loads them at start and again on every config change notification
(`reload`), and a change made through it applies at once. The decisions are strom.telemetry's
(subscriptions.py: instances, subscription ids, throttling; otlp.py: the pushed metrics folded into the
instance's latest values). Kafka hands pushed metrics to a reporter plugin; Strom exports them itself,
on ``/metrics`` (strom.web.metrics_collector), per client instance and client id.

A client is matched on what the broker knows of it: its instance id, its client id, its address; the
software name and version of ApiVersions v3 are not kept per connection here, so a subscription
selecting on them matches no client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strom._util.clock import Clock
from strom.cluster.client_metrics_znodes import ClientMetricsZnodes
from strom.cluster.metadata_store import MetadataStoreError
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.uuid_text import new_uuid
from strom.telemetry.otlp import TelemetryTooLarge, fold_push
from strom.telemetry.subscriptions import (
    ACCEPTED_COMPRESSION,
    ClientInstance,
    Subscriptions,
    parse_subscription,
)

log = logging.getLogger(__name__)

__all__ = ["ClientTelemetry"]


class ClientTelemetry:
    def __init__(self, store: ClientMetricsZnodes, clock: Clock, max_bytes: int) -> None:
        self._store = store
        self._clock = clock
        self.max_bytes = max_bytes
        self.subscriptions = Subscriptions(new_uuid)
        self.pushes = 0  # accepted pushes with metrics

    def reload(self) -> None:
        self.subscriptions.replace(self._store.read_all())

    @staticmethod
    def attributes(client_id: str | None, client_host: str) -> dict[str, str]:
        return {"client_id": client_id or "", "client_source_address": client_host}

    def get(self, instance_id: bytes, attributes: dict[str, str]) -> tuple[ClientInstance, int]:
        return self.subscriptions.get(instance_id, attributes, self._clock.monotonic_ms())

    def push(
        self,
        instance_id: bytes,
        attributes: dict[str, str],
        subscription_id: int,
        terminating: bool,
        compression: int,
        metrics: bytes,
    ) -> int:
        """A PushTelemetry's error code; accepted metrics are folded into the instance's values."""
        instance, error = self.subscriptions.push(
            instance_id,
            attributes,
            subscription_id,
            terminating,
            compression,
            len(metrics),
            self.max_bytes,
            self._clock.monotonic_ms(),
        )
        if error or instance is None or not metrics:
            return error
        try:
            fold_push(instance, compression, metrics, self.max_bytes)
        except TelemetryTooLarge as exc:
            log.warning("client metrics from %s refused: %s", instance.attributes["client_instance_id"], exc)
            instance.last_error = int(ErrorCode.TELEMETRY_TOO_LARGE)
            return instance.last_error
        except ValueError as exc:
            log.warning("client metrics from %s refused: %s", instance.attributes["client_instance_id"], exc)
            instance.last_error = int(ErrorCode.INVALID_RECORD)
            return instance.last_error
        self.pushes += 1
        return 0

    @property
    def accepted_compression(self) -> list[int]:
        return list(ACCEPTED_COMPRESSION)

    # the CLIENT_METRICS config resource ------------------------------------------------------------
    async def read(self, name: str) -> dict[str, str]:
        return await _off_loop(lambda: self._store.read(name))

    async def alter(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
    ) -> None:
        current = await self.read(name)
        wanted = {k: v for k, v in change(dict(current)).items() if v != ""}
        if wanted:
            parse_subscription(name, wanted)  # KafkaError: INVALID_CONFIG / INVALID_REQUEST
        if validate_only or wanted == current:
            return
        await _off_loop(lambda: self._store.write(name, wanted))
        self.reload()
        log.info("client-metrics subscription %s set to %s", name, wanted)


async def _off_loop(call: Callable[[], dict[str, str] | None]) -> dict[str, str]:
    try:
        found = await asyncio.to_thread(call)
    except MetadataStoreError as exc:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the metadata store did not answer: {exc}") from None
    return found or {}
