"""A follower serving consumers (KIP-392), in process: the follower's side of the rules, on a manual clock.

The broker follows a leader at a port nothing listens on, so only what the test gives it changes: batches
appended as a fetcher would, the high watermark it would learn, and the cluster metadata (ISR) an
UpdateMetadata would bring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch, decode_batches
from tests.inprocess.harness import InProcessBroker, batch, produce_body, settle
from tests.integration.rawclient import fetch_body


def run(scenario: Callable[[InProcessBroker], Awaitable[None]], log_dir: Path) -> None:
    async def main() -> None:
        async with InProcessBroker(log_dir) as node:
            await scenario(node)

    asyncio.run(main())


def update_metadata(isr: list[int]) -> dict[str, Any]:
    return {
        "controller_id": 1,
        "controller_epoch": 1,
        "live_brokers": [{"id": b, "host": "127.0.0.1", "port": 1, "rack": f"R{b + 1}"} for b in (0, 1)],
        "topics": [
            {
                "topic_name": "r",
                "topic_id": bytes(16),
                "partition_states": [
                    {
                        "partition_index": 0,
                        "leader": 1,
                        "leader_epoch": 1,
                        "replicas": [1, 0],
                        "isr": isr,
                        "offline_replicas": [],
                    }
                ],
            }
        ],
    }


def consumer_fetch(offset: int, *, epoch: int = 1, max_wait_ms: int = 0) -> dict[str, Any]:
    body = fetch_body([("r", 0, offset, 1 << 20)], max_wait_ms=max_wait_ms, min_bytes=1)
    body["rack_id"] = "R1"
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = epoch
    return body


def only(response: dict[str, Any]) -> dict[str, Any]:
    return dict(response["responses"][0]["partitions"][0])


def offsets(part: dict[str, Any]) -> list[int]:
    return [r.offset for b in decode_batches(part["records"]) for r in b.records]


def test_a_follower_serves_below_its_high_watermark_while_in_the_isr(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.follow("r", 0, leader=1, replicas=[1, 0], epoch=1)
        node.broker.metadata.apply_update_metadata(update_metadata(isr=[1, 0]))
        part = node.broker.replica_manager.partitions[("r", 0)]
        for base in (0, 2):  # two batches, as the fetcher appends them
            part.log.append_as_follower(
                build_batch(
                    [(None, b"v", (), 0), (None, b"w", (), 1)], base_offset=base, partition_leader_epoch=1
                )
            )
        part.log.high_watermark = 2  # what the leader's last fetch response said
        consumer = await node.client()

        got = only(await consumer.request(ApiKey.FETCH, 11, consumer_fetch(0)))
        assert (got["error_code"], got["high_watermark"], offsets(got)) == (0, 2, [0, 1])
        # Above its high watermark but within its log: nothing yet, no error (the consumer waits).
        got = only(await consumer.request(ApiKey.FETCH, 11, consumer_fetch(3)))
        assert (got["error_code"], offsets(got)) == (0, [])
        # A parked consumer is answered when the follower learns a higher high watermark.
        cid = consumer.send(ApiKey.FETCH, 11, consumer_fetch(2, max_wait_ms=60_000))
        await settle()
        assert not consumer.answered()
        part.log.high_watermark = 4
        node.broker.replica_manager.fetchers.on_high_watermark(("r", 0))
        got_cid, answer = await consumer.receive()
        assert got_cid == cid and offsets(only(answer)) == [2, 3]

        # Once the metadata no longer lists it in the ISR, it sends consumers back to the leader.
        node.broker.metadata.apply_update_metadata(update_metadata(isr=[1]))
        got = only(await consumer.request(ApiKey.FETCH, 11, consumer_fetch(0)))
        assert got["error_code"] == ErrorCode.REPLICA_NOT_AVAILABLE
        node.broker.metadata.apply_update_metadata(update_metadata(isr=[1, 0]))
        assert only(await consumer.request(ApiKey.FETCH, 11, consumer_fetch(0)))["error_code"] == 0
        # Below v11 a consumer may only read from the leader.
        got = only(await consumer.request(ApiKey.FETCH, 10, consumer_fetch(0)))
        assert got["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await consumer.close()

    run(scenario, tmp_path)


def list_latest(timestamp: int = -1) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": "r",
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}],
            }
        ],
    }


def test_a_new_leader_lagging_its_epoch_start_answers_offset_not_available(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1], epoch=0)
        client = await node.client()
        produced = await client.request(ApiKey.PRODUCE, 8, produce_body("r", 0, batch([b"a", b"b"]), acks=1))
        assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
        # Leadership at a new epoch starts at offset 2 while the high watermark is still 0 (the follower
        # has not fetched): latest would go backwards for a consumer that saw more elsewhere (KIP-207).
        node.lead("r", 0, replicas=[0, 1], isr=[0, 1], epoch=1)
        for timestamp in (-1, 4_000_000_000_000):
            answer = await client.request(ApiKey.LIST_OFFSETS, 5, list_latest(timestamp))
            assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.OFFSET_NOT_AVAILABLE
        earliest = await client.request(ApiKey.LIST_OFFSETS, 5, list_latest(-2))
        assert earliest["topics"][0]["partitions"][0]["offset"] == 0
        # The follower's fetch at 2 moves the high watermark to the epoch start: latest answers again.
        follower = fetch_body([("r", 0, 2, 1 << 20)])
        follower["replica_id"] = 1
        await client.request(ApiKey.FETCH, 11, follower)
        answer = await client.request(ApiKey.LIST_OFFSETS, 5, list_latest())
        assert answer["topics"][0]["partitions"][0]["offset"] == 2
        await client.close()

    run(scenario, tmp_path)
