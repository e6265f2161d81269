"""strom.broker: the Kafka broker (layer 4): listeners, request handlers, partitions and their replication.

`broker.Broker` assembles one broker from subpackages grouped by job:

* `replication`: the replica manager with its `Partition`s, the replica fetchers and the purgatory;
* `coordinators`: the hosts of the group, transaction and schema-registry coordinators on their
  internal topics;
* `control`: the control plane behind the `ports.ControlPlane` port, `control.cluster_member.ClusterMember`
  over the metadata store (ZooKeeper in a cluster), or `control.single_node.SingleNodeMember`, a cluster
  of one over the local metadata store;
* `network`: the Kafka listener (frames, connection states, dispatch, responses) and the client for
  other brokers;
* `handlers`: one module per API family; `security`: listeners, TLS, SASL, SCRAM.

Beside them: `ports` (the interfaces between the core and what backs it), `metadata_cache` and
`topic_info` (the cluster as UpdateMetadata describes it), `config`, `authorization`. `main` runs the
broker as a process; the HTTP side (`strom.web`) is plugged in from above by `strom.node`.
"""
