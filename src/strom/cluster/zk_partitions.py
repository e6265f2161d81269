"""Partition-state znodes in ZooKeeper: one at a time, and in bulk for the controller.

Mixed into `strom.cluster.kafka_metadata.KafkaMetadataClient` (which provides ``store``, the
`MetadataStore`, ZooKeeper or local). ``/brokers/topics/<t>/partitions/<p>/state`` holds a partition's
leader, leader epoch, ISR and the controller epoch that wrote it (`strom.cluster.zk_paths`); its znode
version is what conditional writes check.

Writers: the controller (elections, first leaders) and a partition's leader (ISR shrink and expand,
followed by an ISR change notification). Every controller write also checks, in the same multi,
that ``/controller_epoch`` still has the version this controller wrote (fencing); a failed check raises
`ControllerMovedError`.

The bulk forms are what make a fail-over with thousands of partitions take seconds: reads are pipelined
(`get_partition_states`, the store's ``get_many``) and writes go in chunked multi-ops
(`update_partition_states`, `create_partition_states`), as `strom.cluster.zk_batching` explains. A
bulk write returns, per partition, the stored state (with its new znode version) or None for a conflict
(the znode's version moved, or it already exists), exactly what the one-at-a-time forms return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from strom.cluster import zk_paths as paths
from strom.cluster.election import LeaderAndIsr
from strom.cluster.metadata_store import (
    BadVersionError,
    Check,
    ControllerMovedError,
    Create,
    Delete,
    MetadataStore,
    MultiFailed,
    NoNodeError,
    Op,
    OpResult,
    SetData,
    Stat,
    Watch,
)
from strom.cluster.zk_batching import chunks, split_failed
from strom.cluster.zk_paths import PartitionStateDoc

__all__ = ["PartitionStateOps", "TopicPartition"]

TopicPartition = tuple[str, int]
Item = tuple[TopicPartition, LeaderAndIsr]


def _state_bytes(state: LeaderAndIsr) -> bytes:
    return PartitionStateDoc(
        state.leader, state.leader_epoch, state.isr, state.controller_epoch, state.elr, state.restarted
    ).encode()


def _decode(data: bytes, version: int) -> LeaderAndIsr:
    doc = PartitionStateDoc.decode(data)
    return LeaderAndIsr(
        doc.leader, doc.leader_epoch, doc.isr, doc.controller_epoch, version, doc.elr, doc.restarted
    )


def _with_version(state: LeaderAndIsr, version: int) -> LeaderAndIsr:
    return dataclasses.replace(state, zk_version=version)


def _fenced(failed: MultiFailed) -> bool:
    """A multi failed on its first operation, the check of ``/controller_epoch``."""
    return failed.index == 0 and isinstance(failed.cause, BadVersionError | NoNodeError)


def _failed_item(failed: MultiFailed, op_counts: Sequence[int]) -> int:
    """The item whose operation failed a multi (operation 0 is the epoch check)."""
    position = 1
    for item, count in enumerate(op_counts):
        position += count
        if failed.index < position:
            return item
    raise MultiFailed(failed.index, failed.cause)


class PartitionStateOps:
    store: MetadataStore

    # one at a time ---------------------------------------------------------------------------------
    def get_partition_state(self, topic: str, partition: int) -> LeaderAndIsr | None:
        try:
            data, stat = self.store.get(paths.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return _decode(data, stat.version)

    def create_partition_state(
        self, topic: str, partition: int, state: LeaderAndIsr, epoch_zk_version: int
    ) -> LeaderAndIsr | None:
        """Create the state znode (controller only, fenced by the epoch version); None if it exists."""
        path = paths.partition_state_path(topic, partition)
        self.store.ensure_path(path.rsplit("/", 1)[0])
        try:
            self.store.multi(
                [Check(paths.CONTROLLER_EPOCH, epoch_zk_version), Create(path, _state_bytes(state))]
            )
        except MultiFailed as failed:
            if _fenced(failed):
                raise ControllerMovedError("controller epoch changed") from None
            return None
        return _with_version(state, 0)

    def update_partition_state(
        self, topic: str, partition: int, state: LeaderAndIsr, epoch_zk_version: int | None = None
    ) -> LeaderAndIsr | None:
        """Conditional write on ``state.zk_version``; the stored state (new version) or None on conflict.

        With ``epoch_zk_version`` (controller writes) the multi also checks /controller_epoch and
        raises `ControllerMovedError` if another controller has been elected since.
        """
        if epoch_zk_version is not None:
            return self.update_partition_states([((topic, partition), state)], epoch_zk_version)[
                (topic, partition)
            ]
        path = paths.partition_state_path(topic, partition)
        try:
            stat = self.store.set(path, _state_bytes(state), state.zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return _with_version(state, stat.version)

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        self.store.create(
            f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_",
            paths.encode_isr_change(partitions),
            sequential=True,
        )

    def read_and_delete_isr_changes(self, children: list[str]) -> set[tuple[str, int]]:
        changed: set[tuple[str, int]] = set()
        nodes = [f"{paths.ISR_CHANGE_NOTIFICATION}/{child}" for child in children]
        for found in self.store.get_many(nodes):
            if found is not None:
                changed.update(paths.decode_isr_change(found[0]))
        for chunk in chunks(nodes, len):
            # A notification deleted meanwhile fails only its chunk.
            self.store.multi_many([[Delete(node) for node in chunk]])
        return changed

    def notify_log_dir_failure(self, broker_id: int, partitions: list[tuple[str, int]]) -> None:
        self.store.create(
            f"{paths.LOG_DIR_EVENT_NOTIFICATION}/log_dir_event_",
            paths.encode_log_dir_failure(broker_id, partitions),
            sequential=True,
        )

    def read_and_delete_log_dir_events(self, children: list[str]) -> dict[int, set[tuple[str, int]]]:
        """Broker -> the replicas its failed log dirs held, from the notifications (then deleted)."""
        failed: dict[int, set[tuple[str, int]]] = {}
        nodes = [f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{child}" for child in children]
        for found in self.store.get_many(nodes):
            event = None if found is None else paths.decode_log_dir_failure(found[0])
            if event is not None:
                failed.setdefault(event[0], set()).update(event[1])
        for chunk in chunks(nodes, len):
            self.store.multi_many([[Delete(node) for node in chunk]])
        return failed

    # in bulk -----------------------------------------------------------------------------------------
    def get_many(
        self, nodes: Sequence[str], watches: Sequence[Watch] | None = None
    ) -> list[tuple[bytes, Stat] | None]:
        """``(data, stat)`` or None (no such node) for each path, read with pipelined requests; with
        ``watches`` (one per node), each read leaves a data watch calling its own."""
        return self.store.get_many(nodes, watches)

    def get_partition_states(
        self, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Every partition's state znode (None where absent), with pipelined reads."""
        found = self.store.get_many([paths.partition_state_path(t, p) for t, p in tps])
        return {
            tp: None if got is None else _decode(got[0], got[1].version)
            for tp, got in zip(tps, found, strict=True)
        }

    def _fenced_multi(
        self,
        items: Sequence[Item],
        epoch_zk_version: int,
        add: Callable[[TopicPartition, LeaderAndIsr], list[Op]],
        stored_version: Callable[[OpResult], int],
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Write ``items`` in chunked multis, each first checking ``/controller_epoch``; ``add`` gives an
        item's operations (the item's result is its last operation's). A multi that fails on one item's
        conflict is not tried again as a whole (each retry would find one more conflict among leaders'
        concurrent ISR writes): its other items go as single fenced multis, pipelined, each succeeding or
        conflicting on its own."""
        outcome: dict[TopicPartition, LeaderAndIsr | None] = {}
        check = Check(paths.CONTROLLER_EPOCH, epoch_zk_version)

        def size(item: Item) -> int:
            return 2 * len(paths.partition_state_path(*item[0])) + 96

        for chunk in chunks(items, size):
            per_item = [add(tp, state) for tp, state in chunk]
            try:
                results = self.store.multi([check, *(op for ops in per_item for op in ops)])
            except MultiFailed as failed:
                if _fenced(failed):
                    raise ControllerMovedError("controller epoch changed") from None
                retry, (conflicted, _) = split_failed(chunk, _failed_item(failed, [len(o) for o in per_item]))
                outcome[conflicted] = None
                singles = self.store.multi_many([[check, *add(tp, state)] for tp, state in retry])
                for (tp, state), single in zip(retry, singles, strict=True):
                    if isinstance(single, MultiFailed):
                        if _fenced(single):
                            raise ControllerMovedError("controller epoch changed") from None
                        outcome[tp] = None
                    else:
                        outcome[tp] = _with_version(state, stored_version(single[-1]))
                continue
            position = 1
            for (tp, state), ops in zip(chunk, per_item, strict=True):
                position += len(ops)
                outcome[tp] = _with_version(state, stored_version(results[position - 1]))
        return outcome

    def update_partition_states(
        self, updates: Sequence[Item], epoch_zk_version: int
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Conditional writes (each on its ``zk_version``) in fenced multis; per partition the stored
        state or None on conflict."""

        def add(tp: TopicPartition, state: LeaderAndIsr) -> list[Op]:
            return [SetData(paths.partition_state_path(*tp), _state_bytes(state), state.zk_version)]

        def version(result: OpResult) -> int:
            assert isinstance(result, Stat)
            return result.version

        return self._fenced_multi(updates, epoch_zk_version, add, version)

    def create_partition_states(
        self, creates: Sequence[Item], epoch_zk_version: int
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Create state znodes in fenced multis; None where one exists. Each multi also creates the
        missing ``partitions/<p>`` parents of its states; the topics' ``partitions`` parents are made
        first (structure only, so not fenced)."""
        for parent in sorted({f"{paths.topic_path(tp[0])}/partitions" for tp, _ in creates}):
            self.store.ensure_path(parent)
        dirs = [paths.partition_state_path(*tp).rsplit("/", 1)[0] for tp, _ in creates]
        missing = {d for d, found in zip(dirs, self.store.exists_many(dirs), strict=True) if found is None}

        def add(tp: TopicPartition, state: LeaderAndIsr) -> list[Op]:
            path = paths.partition_state_path(*tp)
            parent = path.rsplit("/", 1)[0]
            create = Create(path, _state_bytes(state))
            return [Create(parent), create] if parent in missing else [create]

        return self._fenced_multi(creates, epoch_zk_version, add, lambda _created: 0)
