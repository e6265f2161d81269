"""The group coordinator's offset expiry on the coordinator runtime's timers, on a manual clock: a
standalone commit older than ``offsets.retention.minutes`` is gone after the next check
(``offsets.retention.check.interval.ms``, 10 minutes), and not before."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.broker.coordinators.group_service import OFFSETS_RETENTION_CHECK_INTERVAL_MS
from strom.protocol.api import ApiKey
from tests.inprocess.harness import InProcessBroker, PipelinedClient

GROUP = "expiring"
CONFIG = {"offsets.topic.num.partitions": "1", "offsets.retention.minutes": "1"}


async def commit(client: PipelinedClient, offset: int) -> int:
    body = {
        "group_id": GROUP,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset}]}],
    }
    response = await client.request(ApiKey.OFFSET_COMMIT, 7, body)
    return int(response["topics"][0]["partitions"][0]["error_code"])


async def committed(client: PipelinedClient) -> int:
    body = {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]}
    response = await client.request(ApiKey.OFFSET_FETCH, 7, body)
    return int(response["topics"][0]["partitions"][0]["committed_offset"])


def test_offsets_expire_on_the_shard_timer(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        client = await node.client()
        assert await commit(client, 42) == 0
        assert await committed(client) == 42
        await node.advance(OFFSETS_RETENTION_CHECK_INTERVAL_MS - 1)  # retention passed, no check yet
        assert await committed(client) == 42
        await node.advance(1)
        assert await committed(client) == -1
        await client.close()

    async def main() -> None:
        async with InProcessBroker(tmp_path, **CONFIG) as node:
            await scenario(node)

    asyncio.run(main())
