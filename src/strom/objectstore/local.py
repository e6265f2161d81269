"""`LocalObjectStore`: objects as files under one directory (``rsm.config.storage.root``).

Layout: the object ``a/b/c`` is the file ``<root>/<key prefix>a/b/c``. A put writes a temporary file
beside the target (``.<name>.<random>.tmp``), fsyncs it and renames it over the target, then fsyncs
the directory, so a crash leaves either the old object, the new one, or a temporary file that ``list``
never shows. A ranged read into buffers is one ``preadv`` (straight into them). The blocking calls
run on a small thread pool owned by the store. It is the embedded
default, and a directory on a shared file system (NFS) serves several brokers the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, TypeVar

from strom.objectstore.store import ObjectInfo, ObjectNotFoundError, ObjectStoreUnavailableError, check_key

_T = TypeVar("_T")
_COPY_CHUNK = 1024 * 1024
_TMP_SUFFIX = ".tmp"
_IOV_MAX = 1024  # buffers per preadv (Linux's bound)


class LocalObjectStore:
    def __init__(self, root: str, *, key_prefix: str = "", threads: int = 4) -> None:
        self.root = os.path.abspath(root)
        self.key_prefix = key_prefix
        os.makedirs(self.root, exist_ok=True)
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="object-store-local")

    def _path(self, key: str) -> str:
        return os.path.join(self.root, check_key(self.key_prefix + key))

    async def _run(self, fn: Callable[[], _T]) -> _T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(str(exc)) from exc
        except OSError as exc:
            raise ObjectStoreUnavailableError(f"{self.root}: {exc}") from exc

    async def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        await self._run(lambda: write_atomically(path, lambda f: f.write(data)))

    async def put_file(self, key: str, path: str) -> None:
        target = self._path(key)
        # Opened first, outside _run: a missing source is the caller's FileNotFoundError, not a
        # missing object.
        source = await asyncio.get_running_loop().run_in_executor(self._executor, open, path, "rb")
        try:
            await self._run(
                lambda: write_atomically(target, lambda out: shutil.copyfileobj(source, out, _COPY_CHUNK))
            )
        finally:
            source.close()

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        path = self._path(key)

        def read() -> bytes:
            with open(path, "rb") as f:
                return os.pread(f.fileno(), max(end - start, 0), start)

        return await self._run(read)

    async def get_range_into(self, key: str, start: int, buffers: Sequence[memoryview]) -> int:
        path = self._path(key)

        def read() -> int:
            fd = os.open(path, os.O_RDONLY)
            try:
                return _preadv_fully(fd, buffers, start)
            finally:
                os.close(fd)

        return await self._run(read)

    async def get(self, key: str) -> bytes:
        path = self._path(key)

        def read() -> bytes:
            with open(path, "rb") as f:
                return f.read()

        return await self._run(read)

    async def delete(self, keys: Sequence[str]) -> None:
        paths = [self._path(key) for key in keys]

        def unlink() -> None:
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

        await self._run(unlink)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        full_prefix = self.key_prefix + prefix
        return await self._run(lambda: _list(self.root, full_prefix, len(self.key_prefix)))

    async def close(self) -> None:
        self._executor.shutdown(wait=True)


def write_atomically(path: str, fill: Callable[[BinaryIO], object]) -> None:
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}{_TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _preadv_fully(fd: int, buffers: Sequence[memoryview], position: int) -> int:
    """``os.preadv`` into ``buffers`` from ``position`` until they are full or the file ends (one call
    may read less than asked); returns the bytes read."""
    pending = [buffer for buffer in buffers if len(buffer)]
    total = 0
    while pending:
        got = os.preadv(fd, pending[:_IOV_MAX], position + total)
        if got == 0:
            break
        total += got
        while pending and got >= len(pending[0]):
            got -= len(pending.pop(0))
        if got:
            pending[0] = pending[0][got:]
    return total


def _list(root: str, full_prefix: str, strip: int) -> list[ObjectInfo]:
    # Walk only the directory the prefix names (its part up to the last "/"), not the whole root.
    start = os.path.join(root, full_prefix.rpartition("/")[0])
    found: list[ObjectInfo] = []
    for directory, _dirs, files in os.walk(start):
        for name in files:
            if name.startswith(".") and name.endswith(_TMP_SUFFIX):
                continue
            path = os.path.join(directory, name)
            key = os.path.relpath(path, root).replace(os.sep, "/")
            if key.startswith(full_prefix):
                with contextlib.suppress(FileNotFoundError):
                    found.append(ObjectInfo(key[strip:], os.stat(path).st_size))
    return sorted(found, key=lambda info: info.key)
