"""The metadata-store contract (tests/metadata_store_contract.py) against a real ZooKeeper:
the same test functions, with a backend whose sessions are `ZooKeeperStore`s, each test under a
chroot of its own."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from strom.cluster.metadata_store import MetadataStore
from strom.cluster.zookeeper_store import ZooKeeperStore
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.metadata_store_contract import *  # noqa: F403  (the contract's tests, run here)
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster


_chroots = itertools.count()


class ZooKeeperBackend:
    def __init__(self, connect: str) -> None:
        self.connect = connect
        self.session_timeout_ms = 10_000

    def open(self, loop: asyncio.AbstractEventLoop, session_timeout_ms: int = 10_000) -> MetadataStore:
        self.session_timeout_ms = session_timeout_ms
        store = ZooKeeperStore(self.connect, session_timeout_ms, loop)
        store.start()
        return store

    async def expire(self, session: MetadataStore) -> None:
        """End the session on the server, as its expiry does: a second connection takes the session over
        with its id and password and closes it, so the server drops the first connection and answers its
        reconnect with "session expired". (Pausing the server past the session timeout raced: when the
        server ran again, the client's reconnect could renew the session before the server expired it.)"""
        assert isinstance(session, ZooKeeperStore)
        credentials = session.session_credentials
        assert credentials is not None
        thief = KazooClient(hosts=self.connect, client_id=credentials, timeout=self.session_timeout_ms / 1000)

        def end_session() -> None:
            thief.start(timeout=15)
            thief.stop()  # sends CloseSession for the taken-over session
            thief.close()

        await asyncio.to_thread(end_session)


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
    return ZooKeeperBackend(zookeeper.connect + chroot)
