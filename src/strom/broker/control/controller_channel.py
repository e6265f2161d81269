"""`ControllerChannel` over the Kafka protocol: the controller's requests, delivered in order per broker.

Each live broker gets a queue and a sender task with its own connection. Requests are sent one at a
time in enqueue order (a LeaderAndIsr is never overtaken by a later UpdateMetadata); a failed send is
retried after a short back-off until it succeeds or the broker leaves the live set, which drops its
queue (a broker that comes back receives the full state again from the controller). Requests go at the
highest version of Strom's internal layouts (all brokers of a cluster run the same Strom). A queue
serves one registration of its broker: each request goes out stamped with that registration's epoch
(KIP-380), which the broker checks, so a request decided for a broker's previous process is refused by
the process that replaced it; a new registration gets a new queue. The back-off and each request's time
limit run on the broker's clock. Each answer to a LeaderAndIsr is handed to
``on_leader_and_isr_response`` with the broker and the registration it was sent to (the controller
learns from it which replicas are in a failed log dir, strom.cluster.log_dir_failures).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from strom._util.clock import Clock, sleep_ms
from strom.broker.network.net_client import BrokerConnection
from strom.broker.security.client import ClientSecurity
from strom.cluster.propagation import ControllerBody
from strom.cluster.zk_paths import BrokerRegistration
from strom.protocol.api import INTERNAL, ApiKey
from strom.protocol.messages import LeaderAndIsrResponsePartitionError

#: (broker id, the registration's broker epoch, the answer's partition errors)
LeaderAndIsrListener = Callable[[int, int, list[LeaderAndIsrResponsePartitionError]], None]

log = logging.getLogger(__name__)
RETRY_BACKOFF_MS = 200
REQUEST_TIMEOUT_MS = 15_000


class _BrokerQueue:
    def __init__(
        self,
        registration: BrokerRegistration,
        client_id: str,
        security: ClientSecurity,
        clock: Clock,
        answered: LeaderAndIsrListener,
    ) -> None:
        self.registration = registration
        self._answered = answered
        self._clock = clock
        self.queue: asyncio.Queue[tuple[int, ControllerBody]] = asyncio.Queue()
        self.connection = BrokerConnection(registration.host, registration.port, client_id, security, clock)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            api_key, body = await self.queue.get()
            stamped = {**body, "broker_epoch": self.registration.epoch}
            while True:
                try:
                    version = INTERNAL[ApiKey(api_key)][1]
                    response = await self.connection.request(api_key, version, stamped, REQUEST_TIMEOUT_MS)
                except ConnectionError as exc:
                    log.debug("controller request to broker %d failed: %s", self.registration.broker_id, exc)
                    await sleep_ms(self._clock, RETRY_BACKOFF_MS)
                    continue
                if response.get("error_code"):
                    log.warning(
                        "broker %d answered controller request %d with error %s",
                        self.registration.broker_id,
                        api_key,
                        response["error_code"],
                    )
                if api_key == ApiKey.LEADER_AND_ISR:
                    registration = self.registration
                    self._answered(registration.broker_id, registration.epoch, response["partition_errors"])
                break

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.connection.close()


class KafkaControllerChannel:
    def __init__(self, client_id: str, security: ClientSecurity, clock: Clock) -> None:
        self._client_id = client_id
        self._security = security
        self._clock = clock
        self._brokers: dict[int, _BrokerQueue] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self.on_leader_and_isr_response: LeaderAndIsrListener | None = None

    def set_brokers(self, brokers: dict[int, BrokerRegistration]) -> None:
        for broker_id in list(self._brokers):
            current = brokers.get(broker_id)
            if current is None or current != self._brokers[broker_id].registration:
                closing = asyncio.ensure_future(self._brokers.pop(broker_id).close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
        for broker_id, registration in brokers.items():
            if broker_id not in self._brokers:
                self._brokers[broker_id] = _BrokerQueue(
                    registration, self._client_id, self._security, self._clock, self._answered
                )

    def _answered(self, broker_id: int, epoch: int, errors: list[LeaderAndIsrResponsePartitionError]) -> None:
        if self.on_leader_and_isr_response is not None:
            self.on_leader_and_isr_response(broker_id, epoch, errors)

    def send(self, broker_id: int, api_key: int, body: ControllerBody) -> None:
        target = self._brokers.get(broker_id)
        if target is None:
            log.debug("no channel to broker %d; dropping request %d", broker_id, api_key)
            return
        target.queue.put_nowait((api_key, body))

    async def close(self) -> None:
        for queue in list(self._brokers.values()):
            await queue.close()
        self._brokers.clear()
