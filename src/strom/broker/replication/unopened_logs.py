"""Replicas whose log a refusing disk kept from opening, applied again until the log opens.

A LeaderAndIsr state whose log cannot be created or opened (a full or failing disk) is answered with
REPLICA_NOT_AVAILABLE (not KAFKA_STORAGE_ERROR, from which the controller would take the replica for
one in a failed log dir, strom.cluster.log_dir_failures), and the controller does not move the replica:
without another try, a partition created or grown while the disk refused would stay without that
replica, or without its leader, after the disk recovers. `UnopenedLogs` keeps the newest such state per
partition and applies it again when asked (the broker asks every few seconds); a newer state from the
controller replaces it, and one the replica manager now refuses (an older leader epoch) is dropped.
A new leader's one write, its leader-epoch checkpoint, comes before anything of its state is applied:
a refused one leaves the replica as it was (role, epoch, ISR and its znode version), so the state
applied again makes the whole change, the leadership callbacks (the coordinators' loads) included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.protocol.errors import KafkaError
from strom.protocol.messages import LeaderAndIsrRequestPartitionState

__all__ = ["UnopenedLogs"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Endpoints = dict[int, tuple[str, int]]  # broker id -> (host, port) of the leaders
Apply = Callable[[TopicPartition, LeaderAndIsrRequestPartitionState, Endpoints], None]


class UnopenedLogs:
    def __init__(self, apply: Apply) -> None:
        self._apply = apply
        self._states: dict[TopicPartition, tuple[LeaderAndIsrRequestPartitionState, Endpoints]] = {}

    def remember(
        self, tp: TopicPartition, state: LeaderAndIsrRequestPartitionState, endpoints: Endpoints
    ) -> None:
        self._states[tp] = (state, endpoints)

    def forget(self, tp: TopicPartition) -> None:
        self._states.pop(tp, None)

    def retry(self) -> None:
        for tp, (state, endpoints) in sorted(self._states.items()):
            try:
                self._apply(tp, state, endpoints)
            except OSError:
                continue  # the disk still refuses
            except KafkaError as exc:
                log.info("%s-%d: not applied again: %s", tp[0], tp[1], exc)
            else:
                log.info("%s-%d: log opened after an earlier failure", tp[0], tp[1])
            del self._states[tp]
