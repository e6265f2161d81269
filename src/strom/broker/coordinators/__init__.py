"""strom.broker.coordinators: the hosts of the coordinators that live on internal topics.

Each coordinator's state machine lives below the broker (`strom.coordinator`, `strom.transaction`,
`strom.registry`) and runs on the coordinator runtime (`strom.coordinator_runtime`). The modules here
plug them into this broker: `coordinator_partitions.CoordinatorPartitions` is their one door to the
replica manager (the runtime's writer and reader ports over the internal topics' logs, the leadership
hook); `group_service`, `transaction_service` (with `transaction_markers`) and `registry_service`
(with `registry_fetch` and `log_replay` for reading ``_schemas``) host the group, transaction and
schema-registry coordinators; `leader_watermarks` learns, for the group coordinator's lag export, the
high watermarks of partitions this broker has no replica of.

Only `coordinator_partitions` imports the replication package (tests/unit/test_coordinator_hosts.py);
internal topics are created through the control plane's `control.topic_admin`.
"""
