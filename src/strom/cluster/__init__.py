"""strom.cluster: the controller and the cluster metadata it works on (layer 3).

All cluster metadata (broker registrations, topics and partition states, configs, ACLs, SCRAM users,
producer-id blocks) is a tree of znodes in Kafka's ZooKeeper layout behind one port,
`metadata_store.MetadataStore`: `zookeeper_store.ZooKeeperStore` over kazoo in a cluster, or
`local_store` (sessions on an in-memory tree, which a single node persists in its first log dir) for
a single node and the in-process test cluster. `kafka_metadata.KafkaMetadataClient` is Kafka's
operations on that tree, and `controller.Controller` runs the elected controller's events over it,
so the same controller serves a ZooKeeper cluster and a cluster of one.
"""
