"""`BoundedCache`: least recently used entries, bounded by their total size in bytes (remote indexes and
segment chunks, ``remote.log.index.file.cache.total.size.bytes``). An entry larger than the whole bound
is not kept. An entry is ``bytes`` or a ``bytearray`` filled in place by its load (a segment chunk),
never written once cached. Pure, no I/O; not thread-safe (the event loop's)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

Buffer = bytes | bytearray


class BoundedCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self._entries: OrderedDict[Hashable, Buffer] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Buffer | None:
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Buffer) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.size_bytes -= len(old)
        if len(value) > self.max_bytes:
            return
        self._entries[key] = value
        self.size_bytes += len(value)
        while self.size_bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.size_bytes -= len(evicted)

    def __contains__(self, key: Hashable) -> bool:
        """Whether ``key`` is cached (neither a hit nor a use: its place in the order stays)."""
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
