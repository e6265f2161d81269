"""Choosing an object-store backend from ``rsm.config.*`` settings (prefix stripped), and the filesystem
backend's atomic puts (a put that fails leaves nothing visible)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

import pytest

from strom._util.errors import ConfigError
from strom.objectstore.config import open_object_store, s3_settings, uses_s3
from strom.objectstore.local import LocalObjectStore, write_atomically
from strom.objectstore.s3 import S3ObjectStore


def test_a_bucket_name_means_s3_and_every_setting_is_read() -> None:
    settings = {
        "storage.s3.bucket.name": "b",
        "storage.s3.endpoint.url": "http://127.0.0.1:8333",
        "storage.s3.region": "eu-west-1",
        "storage.s3.path.style.access.enabled": "true",
        "storage.aws.access.key.id": "id",
        "storage.aws.secret.access.key": "secret",
        "storage.s3.api.call.attempt.timeout": "1500",
        "storage.s3.connect.timeout.ms": "700",
        "storage.s3.retry.max.attempts": "9",
        "key.prefix": "cluster-a/",
    }
    assert uses_s3(settings)
    s3 = s3_settings(settings)
    assert (s3.bucket, s3.endpoint_url, s3.region, s3.path_style) == (
        "b",
        "http://127.0.0.1:8333",
        "eu-west-1",
        True,
    )
    assert (s3.access_key_id, s3.secret_access_key, s3.key_prefix) == ("id", "secret", "cluster-a/")
    assert (s3.read_timeout_ms, s3.connect_timeout_ms, s3.max_attempts) == (1500, 700, 9)


def test_the_backend_class_can_choose_either_backend() -> None:
    assert uses_s3({"storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"})
    assert not uses_s3(
        {
            "storage.backend.class": "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage",
            "storage.s3.bucket.name": "ignored",
        }
    )


def test_bad_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"path\.style"):
        s3_settings({"storage.s3.bucket.name": "b", "storage.s3.path.style.access.enabled": "maybe"})
    with pytest.raises(ConfigError, match=r"retry\.max\.attempts"):
        s3_settings({"storage.s3.bucket.name": "b", "storage.s3.retry.max.attempts": "many"})
    with pytest.raises(ConfigError, match=r"bucket\.name"):
        s3_settings({"storage.backend.class": "S3Storage"})


def test_without_settings_the_filesystem_backend_is_under_the_default_root(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_object_store({}, str(tmp_path / "default"))
        assert isinstance(store, LocalObjectStore)
        assert store.root == str(tmp_path / "default")
        await store.close()
        s3 = open_object_store(
            {"storage.s3.bucket.name": "b", "storage.s3.endpoint.url": "http://127.0.0.1:1"}, "x"
        )
        assert isinstance(s3, S3ObjectStore)
        await s3.close()

    asyncio.run(scenario())


def test_a_failed_local_put_leaves_neither_object_nor_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "t" / "seg.log"

    def fill_then_fail(out: BinaryIO) -> None:
        out.write(b"half a segment")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        write_atomically(str(target), fill_then_fail)
    assert list((tmp_path / "t").iterdir()) == []
    write_atomically(str(target), lambda out: out.write(b"whole"))
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["seg.log"]
    assert target.read_bytes() == b"whole"


def test_a_missing_source_file_is_the_callers_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = LocalObjectStore(str(tmp_path / "remote"))
        try:
            with pytest.raises(FileNotFoundError):
                await store.put_file("t/seg.log", str(tmp_path / "missing"))
            assert await store.list("t/") == []
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_broker_without_tiered_storage_does_not_load_the_s3_client() -> None:
    """Importing the broker (and reading rsm.config.* settings) must not import botocore."""
    code = (
        "import sys, strom.broker.broker, strom.objectstore.config; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
