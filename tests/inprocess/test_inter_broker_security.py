"""Two brokers in one process, each logging in to the other with its own SASL identity: how a broker
reaches the others is given to each of its components by its composition root, not kept in
process-wide state, so a second broker in the same process cannot change the first one's login. With
sessions of 400 ms (KIP-368) the follower's fetcher re-authenticates on its connection and is never
cut off."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from strom.broker.broker import Broker, Endpoint
from strom.broker.config import BrokerConfig
from strom.broker.network.server import KafkaServer
from strom.broker.security.connection import for_listener
from strom.protocol.api import ApiKey
from tests.inprocess.harness import PipelinedClient, batch, eventually, leader_and_isr, produce_body

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="{me}" password="{me}-secret" user_zero="zero-secret" user_one="one-secret";'
)


def _broker(log_dir: Path, node_id: int, me: str) -> Broker:
    return Broker(
        BrokerConfig(
            {
                "broker.id": str(node_id),
                "log.dirs": str(log_dir),
                "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "listener.name.internal.plain.sasl.jaas.config": JAAS.format(me=me),
                "listener.name.internal.connections.max.reauth.ms": "400",
            }
        )
    )


async def _serve(broker: Broker) -> tuple[KafkaServer, KafkaServer]:
    servers = []
    for listener in broker.listener_setup.listeners:
        server = KafkaServer(
            broker.handler_ports,
            "127.0.0.1",
            0,
            for_listener(broker.config, listener, lambda: broker.credentials),
        )
        host, port = await server.start()
        broker.listener_endpoints[listener.name] = Endpoint(host, port)
        servers.append(server)
    broker.advertised = broker.listener_endpoints["INTERNAL"]
    broker.start_background()
    return servers[0], servers[1]


def test_two_brokers_in_one_process_log_in_with_their_own_identity(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="strom.broker.security.sasl")

    async def main() -> None:
        zero = _broker(tmp_path / "zero", 0, "zero")
        one = _broker(tmp_path / "one", 1, "one")  # built second: a process-wide setting would be its
        assert (zero.inter_broker_security.username, one.inter_broker_security.username) == ("zero", "one")
        servers = [*await _serve(zero), *await _serve(one)]
        try:
            zero.topics.create_topic("t", 1, 1, {})
            state = leader_and_isr("t", 0, leader=0, epoch=0, replicas=[0, 1], isr=[0, 1])
            zero.replica_manager.become_leader_or_follower(state)
            internal = zero.listener_endpoints["INTERNAL"]
            state["live_leaders"] = [{"broker_id": 0, "host_name": internal.host, "port": internal.port}]
            one.replica_manager.become_leader_or_follower(state)
            client = await PipelinedClient.connect(zero.listener_endpoints["PLAINTEXT"].port)
            answer = await client.request(
                ApiKey.PRODUCE, 8, produce_body("t", 0, batch([b"a", b"b", b"c"]), acks=1)
            )
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
            follower = one.replica_manager.partitions[("t", 0)]
            await eventually(lambda: follower.log.log_end_offset == 3, "the follower replicated over SASL")
            await asyncio.sleep(1.0)  # two and a half sessions of fetching
            await client.request(ApiKey.PRODUCE, 8, produce_body("t", 0, batch([b"d"]), acks=1))
            await eventually(lambda: follower.log.log_end_offset == 4, "still replicating")
            await client.close()
        finally:
            for server in servers:
                await server.stop()
            await one.stop()
            await zero.stop()

    asyncio.run(main())
    logins = [r.getMessage() for r in caplog.records if "SASL PLAIN " in r.getMessage()]
    assert any("on INTERNAL as User:one" in line for line in logins), logins
    assert not any("as User:zero" in line for line in logins), logins  # zero never fetched from one
    assert any("re-authentication" in line and "as User:one" in line for line in logins), logins
    expired = [r.getMessage() for r in caplog.records if "has expired" in r.getMessage()]
    assert not expired, expired
