"""`ObjectStore`: the object-storage port, and the errors every backend maps its failures to.

Theory of operation. An object is a key (``/``-separated, relative, no ``..``) and immutable bytes: a
``put`` makes the whole object visible at once or not at all (never a prefix of it), so a reader that
sees a key sees all of it; a second ``put`` of the same key replaces it whole. ``get_range`` reads
``[start, end)``, shortened at the object's end; ``get_range_into`` reads from ``start`` into buffers
the caller owns (a scatter read: each filled in turn, up to their total size or the object's end), so
that a reader keeping the bytes in buffers of its own (the remote reads' cached chunks) gets them
without a copy through an intermediate ``bytes``. ``delete`` is idempotent (a missing key is not an
error), which is what lets a remote-log deletion be retried after a crash. ``list`` answers every
key under a prefix with its size.

Errors. `ObjectNotFoundError` means the key is not there (a definite answer); `ObjectStoreUnavailableError`
means the store could not answer (unreachable, timed out, a server error after the client's retries
with backoff): the caller may try again later, and must not conclude anything about the object.
Every method is a coroutine to be awaited on the event loop; backends do their blocking work on
threads of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from strom._util.errors import StromError


class ObjectStoreError(StromError):
    """A failure of the object store; one of the two subclasses below."""


class ObjectNotFoundError(ObjectStoreError):
    """The key does not exist."""


class ObjectStoreUnavailableError(ObjectStoreError):
    """The store did not answer (after the client's own retries): retriable, says nothing of the object."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(Protocol):
    """Immutable objects by key; see the module docstring for the contract."""

    async def put(self, key: str, data: bytes) -> None: ...

    async def put_file(self, key: str, path: str) -> None:
        """Upload the file at ``path`` (read in the backend's thread, never whole into memory)."""
        ...

    async def get_range(self, key: str, start: int, end: int) -> bytes: ...

    async def get_range_into(self, key: str, start: int, buffers: Sequence[memoryview]) -> int:
        """Fill ``buffers`` in order with the object's bytes from ``start``; returns how many bytes were
        read (less than the buffers' total only at the object's end; 0 from at or past it). Bytes of
        the buffers past that count are left as they were."""
        ...

    async def get(self, key: str) -> bytes: ...

    async def delete(self, keys: Sequence[str]) -> None: ...

    async def list(self, prefix: str) -> list[ObjectInfo]: ...

    async def close(self) -> None: ...


def check_key(key: str) -> str:
    """``key`` if it is a usable object key (relative, no empty, ``.`` or ``..`` parts), else ValueError."""
    parts = key.split("/")
    if not key or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"not an object key: {key!r}")
    return key
