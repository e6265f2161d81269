"""strom.broker.control: this broker's side of the control plane (the `strom.broker.ports.ControlPlane`).

`cluster_member.ClusterMember` is a broker's life in a cluster over the metadata store: registration,
the controller (`strom.cluster.controller`) when this broker is elected, its requests delivered to the
other brokers (`controller_channel`), topic administration (`topic_admin`: Kafka's topic rules),
controlled shutdown, and the `IsrStore` the replica manager writes ISR changes through.
`single_node.SingleNodeMember` is the same for a cluster of one over the local store, its controller
in-process; `catalogue_import` brings in a data dir written before a single node was a cluster of one,
and `meta_properties` pins each log dir to its cluster and node.

The control plane applies the controller's decisions to `strom.broker.replication`; it never imports
the coordinators' hosts, the listener or the handlers (import-linter contracts in pyproject.toml).
"""
