"""This broker's registration in the metadata store, ``/brokers/ids/<id>``, and its broker epoch.

The registration is an ephemeral znode: it lives as long as the broker's ZooKeeper session, and its
creation zxid is the broker epoch (KIP-380) that the controller's requests carry and that fences a
restarted process from decisions meant for the previous one (`strom.broker.control.cluster_member`).

A process registers once at start and again after each session expiry. Each registration after the
first names the epochs this process registered under before (the last `PREVIOUS_EPOCHS_NAMED`), Kafka's
PreviousBrokerEpoch (KIP-966): the controller, whichever of them it saw last, then knows the same
process is back with its log whole, not a new one that may have lost unsynced writes in a machine
crash (`strom.cluster.context.renews`). A process that renewed more often than that is taken for a
restarted one, which costs availability, never safety.

Registration retries while the store refuses it, on the broker's clock: at start until a deadline
(a broken ensemble is a start-up error), after a session expiry without one (an unregistered broker is
fenced for good: no leadership, no ISR membership).
"""

from __future__ import annotations

import logging

from strom._util.clock import Clock, sleep_ms
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.metadata_store import MetadataStoreError
from strom.cluster.zk_paths import BrokerRegistration

log = logging.getLogger("strom.broker.control.cluster_member")

__all__ = ["PREVIOUS_EPOCHS_NAMED", "BrokerRegistrar"]

PREVIOUS_EPOCHS_NAMED = 8
FIRST_RETRY_MS = 500
MAX_RETRY_MS = 5000


class BrokerRegistrar:
    def __init__(self, node_id: int, rack: str | None, client: KafkaMetadataClient, clock: Clock) -> None:
        self.node_id = node_id
        self.rack = rack
        self._client = client
        self._clock = clock
        self._address = ("127.0.0.1", 9092)  # until the broker knows its bound listener
        self._endpoints: tuple[tuple[str, str, int], ...] = ()
        self._protocols: tuple[tuple[str, str], ...] = ()
        self._epochs: list[int] = []  # this process's registrations, oldest first

    @property
    def broker_epoch(self) -> int | None:
        """The epoch of this process's current registration; None until it has registered."""
        return self._epochs[-1] if self._epochs else None

    def listen_at(
        self,
        host: str,
        port: int,
        endpoints: tuple[tuple[str, str, int], ...],
        protocols: tuple[tuple[str, str], ...],
    ) -> None:
        self._address, self._endpoints, self._protocols = (host, port), endpoints, protocols

    def registration(self) -> BrokerRegistration:
        host, port = self._address
        return BrokerRegistration(
            self.node_id,
            host,
            port,
            self.rack,
            0,
            self._endpoints,
            self._protocols,
            tuple(self._epochs[-PREVIOUS_EPOCHS_NAMED:]),
        )

    def register_once(self) -> int:
        """Register now (the store's errors propagate); returns the broker epoch."""
        registration = self.registration()
        self._epochs.append(self._client.register_broker(registration))
        log.info("registered broker %d in the metadata store at %s", self.node_id, registration)
        return self._epochs[-1]

    async def register(self, deadline_ms: int | None) -> int:
        """`register_once`, retried while the store refuses it; ``None``: never give up."""
        delay_ms = FIRST_RETRY_MS
        while True:
            try:
                return self.register_once()
            except MetadataStoreError as exc:
                if deadline_ms is not None and self._clock.monotonic_ms() > deadline_ms:
                    log.error("giving up registering broker %d: %s", self.node_id, exc)
                    raise
                log.info("waiting to register broker %d: %s", self.node_id, exc)
                await sleep_ms(self._clock, delay_ms)
                if deadline_ms is None:
                    delay_ms = min(delay_ms * 2, MAX_RETRY_MS)
