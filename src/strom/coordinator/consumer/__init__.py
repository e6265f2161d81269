"""strom.coordinator.consumer: KIP-848 consumer groups, sans-I/O (docs/consumer-groups.md).

`records.py` lays out the groups' `__consumer_offsets` records; `model.py` holds a group and its
members as replaying those records builds them; `assignors.py` the server-side `uniform` and `range`
assignors; `reconciliation.py` a member's next assignment (revoke first, then take what is free);
`heartbeat.py` decides one ConsumerGroupHeartbeat as records plus a response. The broker hosts them in
its `__consumer_offsets` shards (`strom.broker.coordinators.consumer_group_shard`).
"""
