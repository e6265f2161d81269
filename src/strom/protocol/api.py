"""Kafka API keys, the version ranges Strom advertises, and per-version facts from the specs.

``ApiKey`` names every API whose request/response specs ship with kafka-python (Kafka's names in
UPPER_SNAKE). ``SUPPORTED`` is the version table of docs/protocol.md#advertised-versions: pre-flexible
versions plus ApiVersions 0..4, with the low minimums old librdkafka needs. The broker advertises the
intersection of this table with the keys that have a handler; the codec takes any version the specs describe.
"""

from __future__ import annotations

from enum import IntEnum

from strom.protocol.spec import request_spec

__all__ = ["INTERNAL", "SUPPORTED", "ApiKey", "flexible", "max_spec_version"]


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 13),  # v10: new leaders (KIP-951), v13: topics by id (KIP-516)
    ApiKey.FETCH: (4, 18),  # v13+: topics by id (KIP-516), v16: new leaders (KIP-951)
    ApiKey.LIST_OFFSETS: (1, 11),  # v7: max timestamp (KIP-734); v8-v11: tiered-storage specials
    ApiKey.METADATA: (0, 13),  # v10+: topic ids (KIP-516), v12: topics named by id
    ApiKey.OFFSET_COMMIT: (2, 9),  # v9: KIP-848 members commit with their member epoch (same layout)
    # v7: require_stable (KIP-447), v8: several groups (KIP-709), v9: member id and epoch (KIP-848)
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),  # v4+: batched keys (KIP-699)
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),  # v5: protocol type and name checked
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),  # v4: states filter (KIP-518), v5: types filter (KIP-848)
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),  # v5+: configs (KIP-525), v7: topic id
    ApiKey.DELETE_TOPICS: (0, 6),  # v6: topics by id (KIP-516)
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),  # v3+: KIP-360 epoch bumps; v5: KIP-890's error code
    # Transactions (docs/transactions.md#what-a-client-sees): v3 is the first flexible version;
    # AddPartitionsToTxn v4+ is the broker-to-broker batch of KIP-890 (verify_only); v4 of the others
    # (v5 of AddPartitionsToTxn) may answer TRANSACTION_ABORTABLE. EndTxn v5 and TxnOffsetCommit v5
    # are transaction version 2 (KIP-890 part 2): not served, as no transaction.version is advertised.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),  # v3: group metadata (KIP-447)
    # Transaction admin (KIP-664): flexible-only APIs of admin tools.
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),  # v1: duration filter, v2: transactional id pattern (KIP-1152)
    # A transaction coordinator to partition leaders (Strom's coordinators send v0), and admin tools
    # aborting a hanging transaction at a partition's leader (kafka-transactions.sh abort; v1 is v0
    # flexible, the first version Kafka 4 accepts; v2 adds the marker's transaction version).
    ApiKey.WRITE_TXN_MARKERS: (0, 2),
    ApiKey.DESCRIBE_ACLS: (0, 3),  # v2+ flexible; v3 adds the USER resource type
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    # KIP-848 consumer groups (consumer_group_specs.py: the installed specs lack them).
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    # KIP-932 share groups (share_group_specs.py): v1, the first stable version, all librdkafka sends.
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 1),
    # The share-group offset admin APIs (share_offsets_specs.py); Describe v1 adds the lag.
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    # Replication (cluster mode; a single node answers them from its own log / trivially).
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    # SASL (security/sasl.py): Handshake 0..1 only (KAFKA-9577); SCRAM credentials (KIP-554) flexible-only.
    # Cluster description without Metadata (cluster_describe.py): DescribeCluster (KIP-700),
    # DescribeTopicPartitions (KIP-966, paged), DescribeLogDirs (v0 is v1: the minimum stays low).
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 5),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # KIP-113 (log_dirs.py); the specs start at v1
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # Client telemetry (KIP-714; telemetry_specs.py: the installed specs lack them).
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
    ApiKey.PUSH_TELEMETRY: (0, 0),
    # Client quotas (KIP-546; handlers/client_quotas.py): v1 is v0 flexible.
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
}

# Broker-to-broker APIs (Strom's own layouts, internal_specs.py, and KIP-932's share-state APIs):
# served, never advertised.
INTERNAL: dict[ApiKey, tuple[int, int]] = {
    ApiKey.LEADER_AND_ISR: (0, 2),
    ApiKey.STOP_REPLICA: (0, 1),
    ApiKey.UPDATE_METADATA: (0, 2),
    ApiKey.CONTROLLED_SHUTDOWN: (0, 0),
    # A share-partition's leader to the share coordinator (KIP-932, share_state_specs.py).
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
}


def flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of the API uses the flexible (KIP-482) encoding; False for unknown keys."""
    spec = request_spec(api_key)
    return spec is not None and spec.flexible(version)


def max_spec_version(api_key: int) -> int:
    """The highest version the specs describe (-1 for a key unknown to them)."""
    spec = request_spec(api_key)
    return -1 if spec is None else spec.max_version
