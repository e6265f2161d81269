"""strom.broker.replication: the partitions this broker hosts and the rules of their replication.

`replica_manager.ReplicaManager` holds the hosted `partition.Partition`s (the leader's and the
follower's rules, their pure decisions in `isr_rules`), applies the controller's LeaderAndIsr and
StopReplica, and answers the calls the request handlers and the coordinators' hosts make (append,
fetch, the reads of other APIs). Followers pull from leaders with `replica_fetcher`; parked fetches and
acks=all waits sit in `purgatory`; ISR changes are proposed through `isr_proposals` and written behind
the `strom.broker.ports.IsrStore` port; `replica_selector` chooses the closest replica (KIP-392).

This package knows nothing of what sits above it: it imports neither the coordinators' hosts, nor the
control plane, nor the listener or the handlers (an import-linter contract in pyproject.toml). It
reaches other brokers only through `strom.broker.network.net_client` (the fetchers) and learns the
cluster through the metadata cache and the ports beside it.
"""
