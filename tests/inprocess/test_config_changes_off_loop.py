"""Config-change notifications (``/config/changes``) are read off the event loop: each read of the
metadata store is a ZooKeeper round trip in a cluster, and the broker must go on answering requests
while one is slow. Here the store's reads of a notification and of the topic's configs are held until
the broker has answered a Metadata request; they must run in a worker thread, and the new topic config
still reaches the partition's log."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from strom.broker.control.cluster_member import CONFIG_CHANGE_RETRY_MS, ClusterMember
from strom.cluster.metadata_store import MetadataStoreError
from strom.protocol.api import ApiKey
from strom.quota.entity import QuotaEntity
from tests.inprocess.harness import WAIT_S, InProcessBroker, eventually

T = TypeVar("T")


def test_config_change_reads_wait_off_the_event_loop(tmp_path: Path) -> None:
    async def main() -> None:
        async with InProcessBroker(tmp_path) as node:
            node.broker.topics.create_topic("t", 1, 1, {})
            member = node.broker.control
            assert isinstance(member, ClusterMember)
            client = member.metadata_client
            released = threading.Event()
            readers: list[str] = []

            def held(read: Callable[[str], T]) -> Callable[[str], T]:
                def call(name: str) -> T:
                    readers.append(threading.current_thread().name)
                    released.wait(3 * WAIT_S)  # a ZooKeeper that does not answer yet
                    return read(name)

                return call

            client.read_config_change = held(client.read_config_change)  # type: ignore[method-assign,assignment]
            member.metadata._load_configs = held(member.metadata._load_configs)
            client.set_topic_config("t", {"retention.ms": "12345"})
            await eventually(lambda: bool(readers), "the notification read")
            kafka = await node.client()
            answer = await asyncio.wait_for(kafka.request(ApiKey.METADATA, 1, {"topics": None}), WAIT_S)
            assert [t["name"] for t in answer["topics"]] == ["t"]
            released.set()

            def applied() -> bool:
                log = node.broker.log_manager.get_log("t", 0)
                return log is not None and log.config.retention_ms == 12345

            await eventually(applied, "the new config in the log")
            assert len(readers) == 2 and threading.main_thread().name not in readers, readers
            await kafka.close()

    asyncio.run(main())


def test_a_failed_refresh_is_retried_and_later_notifications_still_apply(tmp_path: Path) -> None:
    """A refresh that fails (the metadata store lost for a moment) leaves its notification unseen: it is
    applied again after a pause on the broker's clock, and the notifications after it are still followed."""

    async def main() -> None:
        async with InProcessBroker(tmp_path) as node:
            member = node.broker.control
            assert isinstance(member, ClusterMember)
            failures = [MetadataStoreError("the store went away")]

            async def flaky() -> None:
                if failures:
                    raise failures.pop()

            member.on_entity_change.insert(0, flaky)
            quotas = node.broker.quotas
            tenant_a, tenant_b = QuotaEntity(client_id="tenant-a"), QuotaEntity(client_id="tenant-b")
            node.broker.quota_store.alter(tenant_a, {"producer_byte_rate": 1000.0})
            await eventually(lambda: not failures, "the failed refresh")
            await node.advance(CONFIG_CHANGE_RETRY_MS)
            await eventually(lambda: tenant_a in quotas.quotas, "the quota after the failure")
            node.broker.quota_store.alter(tenant_b, {"producer_byte_rate": 2000.0})
            await eventually(lambda: tenant_b in quotas.quotas, "the next quota")

    asyncio.run(main())


def test_a_notification_read_before_a_local_write_is_not_applied_over_it(tmp_path: Path) -> None:
    """A notification's configs read in the worker thread, then an AlterConfigs on this broker writes the
    topic's configs before that read is applied: the read is stale and must not undo the write (it is
    read again), even for the moment until the write's own notification comes round."""

    async def main() -> None:
        async with InProcessBroker(tmp_path) as node:
            node.broker.topics.create_topic("t", 1, 1, {})
            member = node.broker.control
            assert isinstance(member, ClusterMember)
            read_done, released = threading.Event(), threading.Event()
            read_configs, set_configs = member.metadata.read_configs, member.metadata.set_configs

            def read_then_hold(topic: str) -> dict[str, str]:
                configs = read_configs(topic)
                if not read_done.is_set():
                    read_done.set()
                    released.wait(3 * WAIT_S)  # the answer on its way back from ZooKeeper
                return configs

            applied: list[str | None] = []

            def record(topic: str, configs: dict[str, str]) -> bool:
                applied.append(configs.get("retention.ms"))
                return set_configs(topic, configs)

            member.metadata.read_configs = read_then_hold  # type: ignore[method-assign]
            member.metadata.set_configs = record  # type: ignore[method-assign]
            member.metadata_client.set_topic_config("t", {"retention.ms": "12345"})  # another broker's write
            await eventually(read_done.is_set, "the notification's configs read")
            node.broker.topics.set_topic_configs("t", {"retention.ms": "999"})  # an AlterConfigs here
            released.set()
            await eventually(lambda: "999" in applied, "the local write's notification applied")
            assert "12345" not in applied, applied
            assert node.broker.topics.log_config_for("t").retention_ms == 999

    asyncio.run(main())
