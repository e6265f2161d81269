"""Replica assignment for new topics and partitions: pure functions, no I/O.

Theory of operation (docs/design.md#rack-aware-assignment):

1. Order the brokers into one list that alternates racks: group brokers by rack (racks in name order,
   brokers within a rack in id order) and take one broker from each rack in turn, skipping racks that
   have run out. With racks R1 = {0, 1, 2} and R2 = {3, 4, 5} the list is 0, 3, 1, 4, 2, 5
   (R1-B0, R2-B3, R1-B1, R2-B4, R1-B2, R2-B5). Without rack information (any broker lacks a rack) the
   list is simply the brokers in id order.
2. Partition ``i``'s leader is list[i mod n]; its k-th follower is list[(i + k) mod n]. The replica list
   of a partition is ``[leader, follower 1, follower 2, ...]`` and its first entry is the *preferred
   leader*.

For topic Invoice (10 partitions, replication factor 3) on the six brokers above this reproduces the
reference table exactly: broker 0 leads P0 and P6, is the first follower of P5 and the second of P4.

Adding partitions (CreatePartitions) continues the same formula from the first new partition index, so
the existing partitions keep their replicas and the new ones fall where a topic created with the larger
count would have put them.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.protocol.errors import ErrorCode, KafkaError

__all__ = ["assign_replicas", "rack_alternating_order"]


def rack_alternating_order(brokers: Mapping[int, str | None]) -> list[int]:
    """Broker ids in the assignment order: racks alternated, or plain id order when racks are unknown."""
    if not brokers:
        return []
    if any(rack is None for rack in brokers.values()):
        return sorted(brokers)
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in brokers.items():
        assert rack is not None
        by_rack.setdefault(rack, []).append(broker_id)
    columns = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    ordered: list[int] = []
    for row in range(max(len(c) for c in columns)):
        ordered.extend(column[row] for column in columns if row < len(column))
    return ordered


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """Replica lists for partitions ``first_partition .. first_partition + partitions - 1``.

    Raises:
        KafkaError: INVALID_REPLICATION_FACTOR when there are fewer brokers than replicas,
            INVALID_PARTITIONS for a non-positive partition count.
    """
    if partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0")
    order = rack_alternating_order(brokers)
    n = len(order)
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor: {replication_factor} larger than available brokers: {n}",
        )
    return {
        i: [order[(i + k) % n] for k in range(replication_factor)]
        for i in range(first_partition, first_partition + partitions)
    }
