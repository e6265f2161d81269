"""What every part of the controller works with (topic events, deletion, reassignment, log dir
failures, log ends): the context it decides on, the metadata store, the partition state machine that
writes, the requests to brokers, the event queue (a part's watches and answers enqueue their events)
and whether this broker is the active controller (a queued event of a resigned one does nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from strom.cluster.context import ControllerContext
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.cluster.partition_machine import PartitionStateMachine
from strom.cluster.propagation import ControllerRequests

__all__ = ["ControllerPart", "ControllerParts"]


@dataclass(frozen=True, slots=True)
class ControllerParts:
    ctx: ControllerContext
    zk: KafkaMetadataClient
    partitions: PartitionStateMachine
    requests: ControllerRequests
    enqueue: Callable[[Callable[[], None]], None]
    active: Callable[[], bool]


class ControllerPart:
    """A part of the controller, built from the `ControllerParts` it shares with the others."""

    def __init__(self, parts: ControllerParts) -> None:
        self.ctx = parts.ctx
        self.zk = parts.zk
        self.partitions = parts.partitions
        self.requests = parts.requests
        self._enqueue = parts.enqueue
        self._active = parts.active
