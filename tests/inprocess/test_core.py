"""The broker core in the test's event loop on a manual clock: no subprocess, no sleeping for time.

Each scenario is decided by the clock the test moves, not by how fast the machine is: a parked request
stays parked until the event it waits for happens or the test advances time past its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import decode_batches
from tests.inprocess.harness import (
    InProcessBroker,
    PipelinedClient,
    batch,
    eventually,
    fetch_body,
    produce_body,
    settle,
)

PRODUCE_V, FETCH_V, METADATA_V = 8, 11, 8


def run(scenario: Callable[[InProcessBroker], Awaitable[None]], log_dir: Path, **overrides: str) -> None:
    async def main() -> None:
        async with InProcessBroker(log_dir, **overrides) as node:
            await scenario(node)

    asyncio.run(main())


def produce(topic: str, values: list[bytes], acks: int = -1, timeout_ms: int = 60_000) -> dict[str, Any]:
    body = produce_body(topic, 0, batch(values), acks=acks)
    body["timeout_ms"] = timeout_ms
    return body


def partition_of(response: dict[str, Any], key: str = "responses") -> dict[str, Any]:
    (topic,) = response[key]
    if "partition_responses" in topic:
        (part,) = topic["partition_responses"]
    else:
        (part,) = topic["partitions"]
    return dict(part)


def follower_fetch(topic: str, replica_id: int, offset: int) -> dict[str, Any]:
    body = fetch_body([(topic, 0, offset, 1 << 20)])
    body["replica_id"] = replica_id
    return body


async def still_waiting(client: PipelinedClient) -> bool:
    await settle()
    await asyncio.sleep(0.02)  # real time passes; the broker's does not
    return not client.answered()


def test_a_single_node_is_a_cluster_of_one(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 3, 1, {})
        client = await node.client()
        meta = await client.request(ApiKey.METADATA, METADATA_V, {"topics": [{"name": "t"}]})
        assert meta["controller_id"] == 0 and [b["node_id"] for b in meta["brokers"]] == [0]
        parts = meta["topics"][0]["partitions"]
        assert [(p["leader_id"], p["leader_epoch"], p["isr_nodes"]) for p in parts] == [(0, 0, [0])] * 3
        for p in range(3):
            part = node.broker.replica_manager.leader_partition("t", p)
            assert (part.replicas, part.isr, part.leader_epoch) == ([0], [0], 0)
        await client.close()

    run(scenario, tmp_path)


def test_produce_then_fetch_round_trip(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        client = await node.client()
        result = partition_of(await client.request(ApiKey.PRODUCE, PRODUCE_V, produce("t", [b"a", b"b"])))
        assert (result["error_code"], result["base_offset"]) == (0, 0)
        body = fetch_body([("t", 0, 0, 1 << 20)])
        fetched = partition_of(await client.request(ApiKey.FETCH, FETCH_V, body))
        assert fetched["high_watermark"] == 2
        records = [r for b in decode_batches(bytes(fetched["records"])) for r in b.records]
        assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"b")]
        await client.close()

    run(scenario, tmp_path)


def test_long_poll_fetch_is_woken_by_an_append_not_by_time(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        consumer, producer = await node.client(), await node.client()
        body = fetch_body([("t", 0, 0, 1 << 20)], max_wait_ms=30_000, min_bytes=1)
        consumer.send(ApiKey.FETCH, FETCH_V, body)
        assert await still_waiting(consumer)
        await producer.request(ApiKey.PRODUCE, PRODUCE_V, produce("t", [b"wake"], acks=1))
        _, fetched = await consumer.receive()
        assert partition_of(fetched)["high_watermark"] == 1
        assert node.broker.purgatory.watched_count() == 0
        await consumer.close()
        await producer.close()

    run(scenario, tmp_path)


def test_long_poll_fetch_expires_exactly_at_max_wait_on_the_clock(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        client = await node.client()
        client.send(ApiKey.FETCH, FETCH_V, fetch_body([("t", 0, 0, 1 << 20)], max_wait_ms=1000, min_bytes=1))
        assert await still_waiting(client)
        await node.advance(999)
        assert await still_waiting(client)
        await node.advance(1)
        _, fetched = await client.receive()
        assert len(partition_of(fetched)["records"] or b"") == 0
        await client.close()

    run(scenario, tmp_path)


def test_requests_on_one_connection_are_answered_one_at_a_time_in_order(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        client = await node.client()
        first = client.send(
            ApiKey.FETCH, FETCH_V, fetch_body([("t", 0, 0, 1 << 20)], max_wait_ms=500, min_bytes=1)
        )
        second = client.send(ApiKey.METADATA, METADATA_V, {"topics": [{"name": "t"}]})
        # Kafka mutes a connection while a request is in progress: the Metadata waits behind the Fetch.
        assert await still_waiting(client)
        await node.advance(500)
        assert (await client.receive())[0] == first
        assert (await client.receive())[0] == second
        await client.close()

    run(scenario, tmp_path)


def test_acks_all_waits_until_every_isr_member_has_the_batch(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1])
        producer, follower = await node.client(), await node.client()
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce("r", [b"x"]))
        assert await still_waiting(producer)
        await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch("r", 1, 0))  # has nothing yet
        assert await still_waiting(producer)
        await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch("r", 1, 1))  # has offset 0
        _, answer = await producer.receive()
        assert (partition_of(answer)["error_code"], partition_of(answer)["base_offset"]) == (0, 0)
        assert node.broker.replica_manager.partitions[("r", 0)].log.high_watermark == 1
        await producer.close()
        await follower.close()

    run(scenario, tmp_path)


def test_acks_all_times_out_on_the_clock(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1])
        producer = await node.client()
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce("r", [b"x"], timeout_ms=8000))
        assert await still_waiting(producer)  # parked (the deadline counts from here)
        await node.advance(7999)
        assert await still_waiting(producer)
        await node.advance(1)
        _, answer = await producer.receive()
        assert partition_of(answer)["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        await producer.close()

    run(scenario, tmp_path)


def test_lagging_follower_leaves_the_isr_and_rejoins_when_caught_up(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1])
        part = node.broker.replica_manager.partitions[("r", 0)]
        producer, follower = await node.client(), await node.client()
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce("r", [b"x"]))
        assert await still_waiting(producer)
        for _ in range(2):  # replica.lag.time.max.ms = 10 000; the expiry check runs every 5 000
            await node.advance(5000)
            assert part.isr == [0, 1] and await still_waiting(producer)
        await node.advance(5000)
        await eventually(lambda: part.isr == [0], "the ISR to shrink")
        # The shrink moved the high watermark, which answers the parked acks=all produce.
        _, answer = await producer.receive()
        assert partition_of(answer)["error_code"] == 0 and part.log.high_watermark == 1
        await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch("r", 1, 1))
        # The expansion takes effect once its conditional write of the partition state is done.
        await eventually(lambda: part.isr == [0, 1], "the ISR to expand")
        await producer.close()
        await follower.close()

    run(scenario, tmp_path)


def test_leader_change_answers_parked_produces_and_fences_the_old_epoch(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1])
        producer, consumer = await node.client(), await node.client()
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce("r", [b"x"]))
        assert await still_waiting(producer)
        node.follow("r", 0, leader=1, replicas=[0, 1], epoch=1)
        _, answer = await producer.receive()
        assert partition_of(answer)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        stale = fetch_body([("r", 0, 0, 1 << 20)])
        stale["topics"][0]["partitions"][0]["current_leader_epoch"] = 0
        fetched = await consumer.request(ApiKey.FETCH, FETCH_V, stale)
        assert partition_of(fetched)["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
        again = await producer.request(ApiKey.PRODUCE, PRODUCE_V, produce("r", [b"y"]))
        assert partition_of(again)["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await producer.close()
        await consumer.close()

    run(scenario, tmp_path)
