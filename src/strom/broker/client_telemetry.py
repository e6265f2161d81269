"""Client telemetry on this broker (KIP-714): the subscriptions configured as CLIENT_METRICS config
resources, the GetTelemetrySubscriptions and PushTelemetry decisions, and the pushed metrics kept for
``/metrics``.

Theory of operation. The subscriptions live in the metadata store (strom.cluster.client_metrics_znodes),
so every broker knows them: this one loads them at start and again on every config change notification
(`reload`), and a change made through it applies at once. The decisions are strom.telemetry's
(subscriptions.py: instances, subscription ids, throttling; otlp.py: the pushed metrics folded into the
instance's latest values). Kafka hands pushed metrics to a reporter plugin; Strom exports them itself,
on ``/metrics`` (strom.web.metrics_collector), per client instance and client id.

A client is matched on what the broker knows of it (`ClientTelemetry.attributes`): its instance id and
client id, and what its connection keeps in a `ClientInformation`: the address and source port of the
peer, and the software name and version the client sent in ApiVersions v3 (``unknown`` before that, or
when a client sends none, as Kafka). As in Kafka, a selector on something not known (the source port
of a connection without one) matches no client.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from strom._util.clock import Clock
from strom.broker.control.entity_view import EntityView
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

__all__ = ["ClientInformation", "ClientTelemetry"]

UNKNOWN_SOFTWARE = "unknown"  # Kafka's name and version of a client that sent none
# What Kafka accepts as a software name or version: letters, digits, '-' and '.', starting and ending
# with a letter or digit. ApiVersions v3+ naming anything else is answered INVALID_REQUEST.
_SOFTWARE_TEXT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?")


def valid_software(name: str | None, version: str | None) -> bool:
    """Whether Kafka accepts this client software name and version (ApiVersions v3+)."""
    return bool(name and version and _SOFTWARE_TEXT.fullmatch(name) and _SOFTWARE_TEXT.fullmatch(version))


@dataclass(slots=True)
class ClientInformation:
    """One client connection's peer: its address and source port, and the software name and version
    of its ApiVersions v3 (telemetry's selectors). One object per connection, made by the listener
    (`learn_peer`); the ApiVersions handler fills in the software (`learn_software`).
    """

    host: str = "?"
    source_port: int | None = None
    software_name: str = UNKNOWN_SOFTWARE
    software_version: str = UNKNOWN_SOFTWARE

    def learn_peer(self, peer: object) -> str:
        """Keep the address and port of a transport's ``peername``; the address ("?" if none)."""
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.host, self.source_port = str(peer[0]), int(peer[1])
        return self.host

    def learn_software(self, name: str | None, version: str | None) -> None:
        """Keep the software an ApiVersions v3 named, if Kafka would (both names valid)."""
        if name is not None and version is not None and valid_software(name, version):
            self.software_name, self.software_version = name, version


class ClientTelemetry:
    def __init__(self, store: ClientMetricsZnodes, clock: Clock, max_bytes: int) -> None:
        self._store = store
        self._clock = clock
        self.max_bytes = max_bytes
        self.subscriptions = Subscriptions(new_uuid)
        # The subscriptions as stored, re-read on the metadata store's change notifications.
        self.view = EntityView(store.read_all, self.subscriptions.replace)
        self.pushes = 0  # accepted pushes with metrics

    @staticmethod
    def attributes(
        client_id: str | None, client_host: str, client: ClientInformation | None
    ) -> dict[str, str]:
        """The selectors' values for a client (those unknown are left out: they match nothing)."""
        found = {"client_id": client_id or "", "client_source_address": client_host}
        if client is None:
            client = _NOTHING_KNOWN
        found["client_software_name"] = client.software_name
        found["client_software_version"] = client.software_version
        if client.source_port is not None:
            found["client_source_port"] = str(client.source_port)
        return found

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
        await self.view.refresh()
        log.info("client-metrics subscription %s set to %s", name, wanted)


_NOTHING_KNOWN = ClientInformation()


async def _off_loop(call: Callable[[], dict[str, str] | None]) -> dict[str, str]:
    try:
        found = await asyncio.to_thread(call)
    except MetadataStoreError as exc:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the metadata store did not answer: {exc}") from None
    return found or {}
