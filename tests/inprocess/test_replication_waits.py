"""Who is woken by what on a leader: the acks=all waits and the two kinds of parked fetch.

The broker leads a partition whose ISR has followers the test plays (Fetch with a replica id), on a
manual clock. Kafka's rules checked here: a high-watermark move answers exactly the acks=all produces
it covers, in order, and leaves the others waiting; an append wakes the followers' parked fetches but
not the consumers' (nothing new below the high watermark), and the high-watermark move that a
follower's next fetch causes wakes the consumers; an ISR shrink below min.insync.replicas answers the
waiting produces with NOT_ENOUGH_REPLICAS_AFTER_APPEND; a wait that times out leaves nothing behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from strom.broker.replication.replica_selector import RACK_AWARE_SELECTOR
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from tests.inprocess.harness import InProcessBroker, batch, eventually, fetch_body, produce_body, settle

PRODUCE_V, FETCH_V = 8, 11


def run(scenario: Callable[[InProcessBroker], Awaitable[None]], log_dir: Path, **overrides: str) -> None:
    async def main() -> None:
        async with InProcessBroker(log_dir, **overrides) as node:
            await scenario(node)

    asyncio.run(main())


def produce(values: list[bytes], timeout_ms: int = 60_000) -> dict[str, Any]:
    body = produce_body("r", 0, batch(values), acks=-1)
    body["timeout_ms"] = timeout_ms
    return body


def only_partition(response: dict[str, Any]) -> dict[str, Any]:
    (topic,) = response["responses"]
    (part,) = topic["partition_responses"] if "partition_responses" in topic else topic["partitions"]
    return dict(part)


def follower_fetch(replica_id: int, offset: int, max_wait_ms: int = 0) -> dict[str, Any]:
    body = fetch_body([("r", 0, offset, 1 << 20)], max_wait_ms=max_wait_ms, min_bytes=1)
    body["replica_id"] = replica_id
    return body


async def parked(node: InProcessBroker) -> tuple[int, int]:
    """(acks=all waits, parked fetches) once the loop has run what it can."""
    await settle()
    await asyncio.sleep(0.02)
    return node.broker.replica_manager.delayed_produces.watched_count(), node.broker.purgatory.watched_count()


def test_a_high_watermark_move_answers_exactly_the_produces_it_covers(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1])
        producer, follower = await node.client(), await node.client()
        first = producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"a", b"b"]))  # offsets 0-1
        second = producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"c"]))  # offset 2
        third = producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"d", b"e"]))  # offsets 3-4
        assert await parked(node) == (3, 0)
        await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch(1, 2))  # has offsets 0-1
        got, answer = await producer.receive()
        assert got == first and only_partition(answer)["base_offset"] == 0
        assert await parked(node) == (2, 0) and not producer.answered()
        await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch(1, 5))  # has everything
        assert [(await producer.receive())[0] for _ in range(2)] == [second, third]
        assert await parked(node) == (0, 0)
        await producer.close()
        await follower.close()

    run(scenario, tmp_path)


def test_an_append_wakes_followers_and_the_high_watermark_move_wakes_consumers(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1, 2], isr=[0, 1, 2])
        producer, consumer = await node.client(), await node.client()
        follower_1, follower_2 = await node.client(), await node.client()
        consumer.send(
            ApiKey.FETCH, FETCH_V, fetch_body([("r", 0, 0, 1 << 20)], max_wait_ms=60_000, min_bytes=1)
        )
        follower_1.send(ApiKey.FETCH, FETCH_V, follower_fetch(1, 0, max_wait_ms=60_000))
        follower_2.send(ApiKey.FETCH, FETCH_V, follower_fetch(2, 0, max_wait_ms=60_000))
        assert await parked(node) == (0, 3)
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"x", b"y"]))
        # The append woke both followers, who get the batch; the consumer sees nothing new yet.
        for follower in (follower_1, follower_2):
            _, fetched = await follower.receive()
            assert only_partition(fetched)["records"] and only_partition(fetched)["high_watermark"] == 0
        assert await parked(node) == (1, 1) and not consumer.answered()
        # Follower 1 reports the batch and parks again; the high watermark still waits for follower 2.
        follower_1.send(ApiKey.FETCH, FETCH_V, follower_fetch(1, 2, max_wait_ms=60_000))
        assert await parked(node) == (1, 2) and not consumer.answered()
        # Follower 2's report moves it: the produce and the consumer are answered, follower 1 is not.
        follower_2.send(ApiKey.FETCH, FETCH_V, follower_fetch(2, 2, max_wait_ms=60_000))
        assert only_partition((await producer.receive())[1])["error_code"] == 0
        assert only_partition((await consumer.receive())[1])["high_watermark"] == 2
        assert await parked(node) == (0, 2) and not follower_1.answered()
        for client in (producer, consumer, follower_1, follower_2):
            await client.close()

    run(scenario, tmp_path)


def test_with_a_replica_selector_followers_learn_the_high_watermark_at_once(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1, 2], isr=[0, 1, 2])
        producer, follower_1, follower_2 = await node.client(), await node.client(), await node.client()
        for replica, follower in ((1, follower_1), (2, follower_2)):
            await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch(replica, 0))  # high watermark 0
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"x", b"y"]))
        await parked(node)
        follower_1.send(ApiKey.FETCH, FETCH_V, follower_fetch(1, 0, max_wait_ms=60_000))
        follower_2.send(ApiKey.FETCH, FETCH_V, follower_fetch(2, 0, max_wait_ms=60_000))
        for follower in (follower_1, follower_2):
            assert only_partition((await follower.receive())[1])["records"]
        follower_1.send(ApiKey.FETCH, FETCH_V, follower_fetch(1, 2, max_wait_ms=60_000))
        assert await parked(node) == (1, 1)
        # Follower 2's report moves the high watermark to 2: the produce is answered, and both followers
        # learn the new high watermark at once, with no records (they serve consumers below it, KIP-392).
        follower_2.send(ApiKey.FETCH, FETCH_V, follower_fetch(2, 2, max_wait_ms=60_000))
        assert only_partition((await producer.receive())[1])["error_code"] == 0
        for follower in (follower_1, follower_2):
            told = only_partition((await follower.receive())[1])
            assert told["high_watermark"] == 2 and not told["records"]
        # Told once: their next fetches park until the next append.
        follower_1.send(ApiKey.FETCH, FETCH_V, follower_fetch(1, 2, max_wait_ms=60_000))
        follower_2.send(ApiKey.FETCH, FETCH_V, follower_fetch(2, 2, max_wait_ms=60_000))
        assert await parked(node) == (0, 2)
        for client in (producer, follower_1, follower_2):
            await client.close()

    run(scenario, tmp_path, **{"replica.selector.class": RACK_AWARE_SELECTOR})


def test_isr_shrinking_below_min_isr_answers_waiting_produces(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1, 2], isr=[0, 1, 2])
        part = node.broker.replica_manager.partitions[("r", 0)]
        producer, follower = await node.client(), await node.client()
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"x"]))
        assert await parked(node) == (1, 0)
        # Follower 1 has the batch and keeps fetching; follower 2 is silent. replica.lag.time.max.ms is
        # 10 000 and the expiry check runs every 5 000: follower 2 leaves the ISR at the third check.
        for _ in range(3):
            await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch(1, 1))
            assert await parked(node) == (1, 0) and not producer.answered()
            await node.advance(5000)
        await eventually(lambda: part.isr == [0, 1], "follower 2 to leave the ISR")
        _, answer = await producer.receive()
        assert only_partition(answer)["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert part.log.high_watermark == 0  # strict min ISR: no move while under min.insync.replicas
        assert await parked(node) == (0, 0)
        await producer.close()
        await follower.close()

    run(scenario, tmp_path, **{"min.insync.replicas": "3"})


def test_a_timed_out_wait_leaves_nothing_behind(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1])
        producer, follower = await node.client(), await node.client()
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"a"], timeout_ms=1000))
        producer.send(ApiKey.PRODUCE, PRODUCE_V, produce([b"b"], timeout_ms=60_000))
        assert await parked(node) == (2, 0)
        await node.advance(1000)
        assert only_partition((await producer.receive())[1])["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        assert await parked(node) == (1, 0)
        await follower.request(ApiKey.FETCH, FETCH_V, follower_fetch(1, 2))
        assert only_partition((await producer.receive())[1])["base_offset"] == 1
        assert await parked(node) == (0, 0)
        await producer.close()
        await follower.close()

    run(scenario, tmp_path)
