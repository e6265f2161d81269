"""Kafka's default key partitioner (murmur2), as the Java client computes it.

Theory of operation
-------------------
Java producers place a keyed record on partition `toPositive(murmur2(key)) % numPartitions`, where
`toPositive` clears the sign bit and `murmur2` is Austin Appleby's MurmurHash2 (32-bit, seed 0x9747b28c)
over the key bytes read as little-endian 32-bit words. librdkafka's `murmur2_random` partitioner computes
the same value for non-null keys (and picks a random partition for null keys), which is what the `strom`
sink configures; this pure-Python copy exists so tests and tools can predict placements independently.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 of `data` as a signed 32-bit int, matching Java's `Utils.murmur2`."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a non-null key."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
