"""``__share_group_state`` is created off the event loop (KIP-932's share coordinator topic, on first
use): the metadata store's writes (a ZooKeeper round trip in a cluster, a journal fsync on a single node)
run in a worker thread while the broker goes on answering. Here the store's write of the topic is held
until the broker has answered a Metadata request; then the topic is created, with the configured
partitions, compacted."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from strom.broker.control.cluster_member import ClusterMember
from strom.broker.coordinators.share_state_service import SHARE_STATE_TOPIC
from strom.protocol.api import ApiKey
from tests.inprocess.harness import WAIT_S, InProcessBroker, eventually


def test_the_share_state_topic_is_written_off_the_event_loop(tmp_path: Path) -> None:
    async def main() -> None:
        async with InProcessBroker(tmp_path, **{"share.coordinator.state.topic.num.partitions": "3"}) as node:
            member = node.broker.control
            assert isinstance(member, ClusterMember)
            client = member.metadata_client
            released = threading.Event()
            writers: list[str] = []
            create = client.create_topic

            def held(name: str, *args: Any) -> None:
                writers.append(threading.current_thread().name)
                released.wait(3 * WAIT_S)  # a metadata store that does not answer yet
                create(name, *args)

            client.create_topic = held  # type: ignore[method-assign]
            node.broker.share_state.request_topic()
            node.broker.share_state.request_topic()  # asked again while under way: one creation
            await eventually(lambda: bool(writers), "the topic's write")
            kafka = await node.client()
            answer = await asyncio.wait_for(kafka.request(ApiKey.METADATA, 1, {"topics": None}), WAIT_S)
            assert SHARE_STATE_TOPIC not in [t["name"] for t in answer["topics"]]
            released.set()
            await eventually(lambda: SHARE_STATE_TOPIC in node.broker.metadata.topics, "the topic")
            info = node.broker.metadata.topics[SHARE_STATE_TOPIC]
            assert (info.partitions, info.configs["cleanup.policy"]) == (3, "compact")
            assert len(writers) == 1 and writers != [threading.main_thread().name], writers
            await kafka.close()

    asyncio.run(main())
