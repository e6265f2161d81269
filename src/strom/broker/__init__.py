"""strom.broker: the Kafka broker (layer 4): listeners, request handlers, partitions and their replication.

`broker.Broker` assembles one broker: the asyncio Kafka listeners (`server`), the request handlers
(`handlers`), the replica manager with its `Partition`s, the replica fetcher and purgatory, and the
coordinators' hosts (`group_service`, `transaction_service`, `registry_service`). What backs it sits
behind the ports of `ports`: `cluster_member.ClusterMember` over ZooKeeper, or
`single_node.SingleNodeMember`, a cluster of one over the local metadata store. `main` runs it as a
process; the HTTP side (`strom.web`) is plugged in from above by `strom.node`.
"""
