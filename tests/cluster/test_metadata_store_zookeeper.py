"""The metadata-store contract (tests/metadata_store_contract.py) against a real ZooKeeper:
the same test functions, with a backend whose sessions are `ZooKeeperStore`s, each test under a
chroot of its own."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.cluster.metadata_store import MetadataStore
from strom.cluster.zookeeper_store import ZooKeeperStore
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.metadata_store_contract import *  # noqa: F403  (the contract's tests, run here)
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster


_chroots = itertools.count()


class ZooKeeperBackend:
    def __init__(self, connect: str, server: ZooKeeperProcess) -> None:
        self.connect = connect
        self.server = server
        self.session_timeout_ms = 10_000

    def open(self, loop: asyncio.AbstractEventLoop, session_timeout_ms: int = 10_000) -> MetadataStore:
        self.session_timeout_ms = session_timeout_ms
        store = ZooKeeperStore(self.connect, session_timeout_ms, loop)
        store.start()
        return store

    async def expire(self, session: MetadataStore) -> None:
        """The server stops (SIGSTOP) for twice the session timeout: when it runs again it expires the
        session, which the client learns on reconnecting."""
        assert self.server.pid is not None
        os.kill(self.server.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(2 * self.session_timeout_ms / 1000)
        finally:
            os.kill(self.server.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    require_zookeeper()
    process = ZooKeeperProcess(Path(tmp_path_factory.mktemp("zk")))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def backend(zookeeper: ZooKeeperProcess) -> ZooKeeperBackend:
    chroot = f"/contract{next(_chroots)}"

    async def make_chroot() -> None:
        root = ZooKeeperStore(zookeeper.connect, 10_000, asyncio.get_running_loop())
        root.start()
        try:
            root.ensure_path(chroot)
        finally:
            root.close()

    asyncio.run(make_chroot())
    return ZooKeeperBackend(zookeeper.connect + chroot, zookeeper)
