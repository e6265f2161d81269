"""The coordinator runtime: hosts a coordinator's per-partition shards over its internal topic.

`runtime.py` (the runtime and its theory of operation), `shard.py` (the shard interface, results,
states, record batching; pure), `loader.py` (replaying stored batches into a shard; pure), `ports.py`
(the writer and reader ports the broker implements).
"""

from strom.coordinator_runtime.ports import PartitionReader, PartitionWriter
from strom.coordinator_runtime.runtime import CoordinatorRuntime
from strom.coordinator_runtime.shard import (
    NO_PRODUCER_ID,
    CoordinatorError,
    CoordinatorResult,
    CoordinatorShard,
    CoordinatorTimer,
    Record,
    ShardContext,
    ShardState,
    TransactionalProducer,
)

__all__ = [
    "NO_PRODUCER_ID",
    "CoordinatorError",
    "CoordinatorResult",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorTimer",
    "PartitionReader",
    "PartitionWriter",
    "Record",
    "ShardContext",
    "ShardState",
    "TransactionalProducer",
]
