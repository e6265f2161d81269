"""strom.coordinator.share: KIP-932 share groups, sans-I/O (docs/share-groups.md).

`membership.py` holds a share group's members, their epochs and the server-side assignment and decides
ShareGroupHeartbeat; `partition.py` is one share-partition's state machine (the start offset, the
in-flight records with their states, delivery counts and acquisition locks). The broker hosts the
groups on their coordinator (`strom.broker.coordinators.share_group_service`) and the share-partitions
on the partitions' leaders (`strom.broker.coordinators.share_partitions`).
"""
