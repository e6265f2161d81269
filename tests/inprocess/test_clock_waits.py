"""Back-offs of broker-to-broker connections run on the broker's clock: a manual clock decides when
a replica fetcher or the controller's channel tries again, however much real time passes.

The "other broker" is a loopback server that counts connections: it drops the first ones (the
failure that starts a back-off) and, for the controller channel, answers once the retry comes.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from strom._util.clock import ManualClock
from strom.broker.control.controller_channel import RETRY_BACKOFF_MS, KafkaControllerChannel
from strom.broker.replication.replica_fetcher import CONNECTION_BACKOFF_MS
from strom.broker.security.client import ClientSecurity
from strom.cluster.zk_paths import BrokerRegistration
from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_request, encode_response
from tests.inprocess.harness import InProcessBroker, eventually, leader_and_isr, settle

_SIZE = struct.Struct(">i")
# Real time in which a back-off on the event loop's clock would long have ended.
REAL_WAIT_S = 2 * CONNECTION_BACKOFF_MS / 1000


class OtherBroker:
    """Accepts connections; the first ``drop`` of them are closed once a request arrives, later ones
    get a LeaderAndIsr answer per request."""

    def __init__(self, drop: int) -> None:
        self.drop = drop
        self.connections = 0
        self.answered: list[int] = []  # correlation ids
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        mine = self.connections
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                request = decode_request(await reader.readexactly(size))
                if mine <= self.drop:
                    break
                body = {"error_code": 0, "partition_errors": []}
                writer.write(
                    encode_response(request.api_key, request.api_version, request.correlation_id, body)
                )
                self.answered.append(request.correlation_id)
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


def test_a_replica_fetcher_retries_a_lost_leader_when_the_clock_says(tmp_path: Path) -> None:
    async def main() -> None:
        leader = OtherBroker(drop=1_000)
        port = await leader.start()
        async with InProcessBroker(tmp_path) as node:
            request = leader_and_isr("t", 0, leader=1, epoch=1, replicas=[1, 0], isr=[1, 0])
            request["live_leaders"] = [{"broker_id": 1, "host_name": "127.0.0.1", "port": port}]
            node.broker.replica_manager.become_leader_or_follower(request)
            await eventually(lambda: leader.connections == 1, "the fetcher's first connection")
            await asyncio.sleep(REAL_WAIT_S)
            assert leader.connections == 1  # backing off: real time does not end it
            await node.advance(CONNECTION_BACKOFF_MS - 1)
            await asyncio.sleep(0.1)
            assert leader.connections == 1
            await node.advance(1)
            await eventually(lambda: leader.connections == 2, "the fetcher's retry")
            await node.advance(CONNECTION_BACKOFF_MS)
            await eventually(lambda: leader.connections == 3, "the fetcher's next retry")
        leader.close()

    asyncio.run(main())


def test_the_controller_channel_resends_after_its_back_off_on_the_clock() -> None:
    async def main() -> None:
        broker = OtherBroker(drop=1)
        port = await broker.start()
        clock = ManualClock()
        channel = KafkaControllerChannel("controller-0", ClientSecurity(), clock)
        channel.set_brokers({1: BrokerRegistration(1, "127.0.0.1", port, None)})
        body = leader_and_isr("t", 0, leader=1, epoch=1, replicas=[1], isr=[1])
        channel.send(1, ApiKey.LEADER_AND_ISR, body)
        await eventually(lambda: broker.connections == 1, "the first attempt")
        await asyncio.sleep(REAL_WAIT_S)
        assert broker.connections == 1 and broker.answered == []
        clock.advance(RETRY_BACKOFF_MS - 1)
        await settle()
        assert broker.connections == 1
        clock.advance(1)
        await eventually(lambda: len(broker.answered) == 1, "the resent request's answer")
        channel.send(1, ApiKey.LEADER_AND_ISR, body)  # the next request goes at once, same connection
        await eventually(lambda: len(broker.answered) == 2, "the next request's answer")
        assert broker.connections == 2
        await channel.close()
        broker.close()

    asyncio.run(main())
