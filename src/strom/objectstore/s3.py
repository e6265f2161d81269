"""`S3ObjectStore`: objects in one bucket of an S3-compatible server, through botocore.

boto3's low-level client is thread-safe but blocking, so every call runs on a thread pool owned by the
store (its size is also the client's connection-pool size) and the event loop only awaits. Retries are
botocore's ``standard`` mode: throttling, 5xx answers and connection failures are retried with
exponential backoff and jitter up to ``max_attempts`` (first try included); what is left is reported as
`ObjectStoreUnavailableError`. Each attempt is bounded by the connect and read timeouts.

A put is one PutObject, whose object S3 makes visible whole or not at all (a file is streamed from
disk, not read into memory). What a put costs the broker's interpreter is kept small, since its threads
share the GIL with the event loop that serves produce and fetch: botocore's defaults would hash the
body twice in Python-driven loops (SigV4's SHA-256 payload signature, which it always computes over
plain HTTP, and its CRC32 flexible checksum) and http.client sends a file in 8 KiB blocks, one
``sendall`` each. Instead the payload is sent unsigned (``UNSIGNED-PAYLOAD``; the headers are still
signed) with a CRC32C computed here in C (the ``crc32c`` package, outside the GIL) and sent as
``x-amz-checksum-crc32c``, which the server checks against the bytes it received (integrity end to
end), botocore computes no checksum of its own where S3 does not require one, and a file is sent in
1 MiB blocks.

A ranged get is a GetObject with a ``Range`` header; a range starting at
or past the end answers no bytes (S3's InvalidRange). A ranged get into buffers (the remote reads')
is a GET of a presigned URL over urllib3, its body read from the socket straight into them
(s3_presigned.py: botocore's request pipeline costs more than twice the CPU per request). Deletes go
in DeleteObjects requests of up to 1,000 keys; S3 answers a missing key as deleted. ``path_style``
puts the bucket in the URL's path (``http://host:port/bucket/key``), which servers other than AWS
usually need.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from crc32c import crc32c

from strom.objectstore.s3_presigned import PresignedRanges
from strom.objectstore.s3_settings import S3Settings
from strom.objectstore.store import (
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStoreUnavailableError,
    check_key,
)

_T = TypeVar("_T")
_DELETE_BATCH = 1000
_NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})
_SEND_BLOCK = 1 << 20


class _LargeBlocks(io.FileIO):
    """A file whose reads return at least ``_SEND_BLOCK`` bytes (up to its end): http.client streams a
    body in reads of its 8 KiB ``blocksize``, one ``sendall`` and GIL hand-over each."""

    def read(self, size: int | None = -1, /) -> bytes:
        if size is not None and size >= 0:
            size = max(size, _SEND_BLOCK)
        return super().read(size) or b""


def _file_crc32c(source: _LargeBlocks) -> int:
    """CRC32C of the file from its current position, which is restored."""
    start, value = source.tell(), 0
    while block := source.read(_SEND_BLOCK):
        value = crc32c(block, value)
    source.seek(start)
    return value


def _crc32c_header(value: int) -> str:
    return base64.b64encode(value.to_bytes(4, "big")).decode()


class S3ObjectStore:
    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self.bucket = settings.bucket
        config = Config(
            region_name=settings.region,
            signature_version="s3v4",  # also for presigned URLs (s3_presigned.py), else SigV2 there
            connect_timeout=settings.connect_timeout_ms / 1000,
            read_timeout=settings.read_timeout_ms / 1000,
            retries={"max_attempts": settings.max_attempts, "mode": "standard"},
            max_pool_connections=settings.threads,
            s3={
                "addressing_style": "path" if settings.path_style else "auto",
                "payload_signing_enabled": False,  # the CRC32C header below guards the bytes
            },
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        # A session of its own: boto3's default session is shared module state.
        session = boto3.session.Session(
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=settings.secret_access_key,
            region_name=settings.region,
        )
        self._client: Any = session.client("s3", endpoint_url=settings.endpoint_url, config=config)
        self._executor = ThreadPoolExecutor(settings.threads, thread_name_prefix="object-store-s3")
        self._ranges = PresignedRanges(self._client, settings)

    def _key(self, key: str) -> str:
        return self.settings.key_prefix + check_key(key)

    async def _run(self, key: str, fn: Callable[[], _T]) -> _T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _NOT_FOUND:
                raise ObjectNotFoundError(f"s3://{self.bucket}/{key}") from exc
            raise ObjectStoreUnavailableError(f"s3://{self.bucket}/{key}: {exc}") from exc
        except (BotoCoreError, OSError) as exc:
            raise ObjectStoreUnavailableError(f"s3://{self.bucket}/{key}: {exc}") from exc

    async def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (for development servers; production buckets are made
        by their owners)."""

        def ensure() -> None:
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError:
                self._client.create_bucket(Bucket=self.bucket)

        await self._run("", ensure)

    async def put(self, key: str, data: bytes) -> None:
        full = self._key(key)
        await self._run(
            key,
            lambda: self._client.put_object(
                Bucket=self.bucket, Key=full, Body=data, ChecksumCRC32C=_crc32c_header(crc32c(data))
            ),
        )

    async def put_file(self, key: str, path: str) -> None:
        full = self._key(key)
        # Opened first, outside _run: a missing source is the caller's FileNotFoundError.
        source = await asyncio.get_running_loop().run_in_executor(self._executor, _LargeBlocks, path)
        try:

            def put() -> None:
                checksum = _crc32c_header(_file_crc32c(source))
                self._client.put_object(Bucket=self.bucket, Key=full, Body=source, ChecksumCRC32C=checksum)

            await self._run(key, put)
        finally:
            source.close()

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        full = self._key(key)

        def get() -> bytes:
            try:
                answer = self._client.get_object(
                    Bucket=self.bucket, Key=full, Range=f"bytes={start}-{end - 1}"
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                    return b""
                raise
            with contextlib.closing(answer["Body"]) as body:
                return bytes(body.read())

        return await self._run(key, get)

    async def get_range_into(self, key: str, start: int, buffers: Sequence[memoryview]) -> int:
        full = self._key(key)
        return await self._run(key, lambda: self._ranges.read_into(full, start, buffers))

    async def get(self, key: str) -> bytes:
        full = self._key(key)

        def get() -> bytes:
            answer = self._client.get_object(Bucket=self.bucket, Key=full)
            with contextlib.closing(answer["Body"]) as body:
                return bytes(body.read())

        return await self._run(key, get)

    async def delete(self, keys: Sequence[str]) -> None:
        full = [self._key(key) for key in keys]

        def delete() -> None:
            for i in range(0, len(full), _DELETE_BATCH):
                chunk = [{"Key": key} for key in full[i : i + _DELETE_BATCH]]
                answer = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True}
                )
                failed = [e for e in answer.get("Errors", []) if e.get("Code") not in _NOT_FOUND]
                if failed:
                    raise ObjectStoreUnavailableError(f"s3://{self.bucket}: delete failed: {failed[:3]}")

        await self._run(keys[0] if keys else "", delete)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        full_prefix = self.settings.key_prefix + prefix
        strip = len(self.settings.key_prefix)

        def list_all() -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full_prefix
            ):
                found.extend(
                    ObjectInfo(item["Key"][strip:], int(item["Size"])) for item in page.get("Contents", [])
                )
            return sorted(found, key=lambda info: info.key)

        return await self._run(prefix, list_all)

    async def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._ranges.close()
        self._client.close()
