"""strom.coordinator: consumer groups and committed offsets (layer 3, no broker or socket code).

`GroupCoordinator` (coordinator.py) is the entry point; `membership.py` answers the classic rebalance
protocol's requests and `rebalance.py` runs the join phase, join timers and member sessions; `group.py`
and `state.py` hold the per-group data and its state machine, `store.py` and `records.py` the
persistence in `__consumer_offsets`, `ports.py` the narrow interfaces the broker implements
(`PartitionWriter`, `Scheduler`).
"""

from strom.coordinator.coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.messages import (
    JoinGroupRequest,
    JoinResult,
    OffsetAndMetadata,
    SyncGroupRequest,
    SyncResult,
    TopicPartition,
)
from strom.coordinator.ports import ManualScheduler, PartitionWriter, Scheduler
from strom.coordinator.records import partition_for
from strom.coordinator.state import GroupState

__all__ = [
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "JoinGroupRequest",
    "JoinResult",
    "ManualScheduler",
    "OffsetAndMetadata",
    "PartitionWriter",
    "Scheduler",
    "SyncGroupRequest",
    "SyncResult",
    "TopicPartition",
    "partition_for",
]
