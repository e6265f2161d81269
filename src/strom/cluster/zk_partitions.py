"""Partition-state znodes in ZooKeeper: one at a time, and in bulk for the controller.

Mixed into `strom.cluster.zk.KafkaZkClient` (which provides the kazoo client, the connection guard
``_call`` and the counters ``stats``). ``/brokers/topics/<t>/partitions/<p>/state`` holds a partition's
leader, leader epoch, ISR and the controller epoch that wrote it (`strom.cluster.zk_paths`); its znode
version is what conditional writes check.

Writers: the controller (elections, first leaders) and a partition's leader (ISR shrink and expand,
followed by an ISR change notification). Every controller write also checks, in the same transaction,
that ``/controller_epoch`` still has the version this controller wrote (fencing); a failed check raises
`ControllerMovedError`.

The bulk forms are what make a fail-over with thousands of partitions take seconds: reads are pipelined
(`get_partition_states`) and writes go in chunked multi-ops (`update_partition_states`,
`create_partition_states`), as `strom.cluster.zk_batching` explains. A bulk write returns, per
partition, the stored state (with its new znode version) or None for a conflict (the znode's version
moved, or it already exists), exactly what the one-at-a-time forms return.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.handlers.threading import KazooTimeoutError

from strom.cluster import zk_paths as paths
from strom.cluster.election import LeaderAndIsr
from strom.cluster.zk_batching import PIPELINE_WINDOW, ZkStats, chunks, split_failed
from strom.cluster.zk_errors import ControllerMovedError, ZkError
from strom.cluster.zk_paths import PartitionStateDoc

__all__ = ["PartitionStateOps", "TopicPartition"]

TopicPartition = tuple[str, int]
#: How long one pipelined batch may take before it counts as a lost connection.
BULK_TIMEOUT_S = 60.0


def _state_bytes(state: LeaderAndIsr) -> bytes:
    return PartitionStateDoc(state.leader, state.leader_epoch, state.isr, state.controller_epoch).encode()


def _decode(data: bytes, version: int) -> LeaderAndIsr:
    doc = PartitionStateDoc.decode(data)
    return LeaderAndIsr(doc.leader, doc.leader_epoch, doc.isr, doc.controller_epoch, version)


#: What a failed multi answers for the operations that did not cause the failure.
_NOT_THE_CAUSE = (RolledBackError, RuntimeInconsistency)


def _failed_item(results: Sequence[Any], op_counts: Sequence[int]) -> int | None:
    """The item whose operation failed a multi (``results[0]`` is the epoch check), None if it succeeded."""
    position = 1
    for item, count in enumerate(op_counts):
        for result in results[position : position + count]:
            if isinstance(result, Exception) and not isinstance(
                result, RolledBackError | RuntimeInconsistency
            ):
                return item
        position += count
    if any(isinstance(r, Exception) for r in results):
        raise ZkError(f"a multi failed without naming an operation: {results!r}")
    return None


class PartitionStateOps:
    _zk: KazooClient
    stats: ZkStats

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    # one at a time ---------------------------------------------------------------------------------
    def get_partition_state(self, topic: str, partition: int) -> LeaderAndIsr | None:
        try:
            data, stat = self._call(self._zk.get, paths.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return _decode(data, int(stat.version))

    def create_partition_state(
        self, topic: str, partition: int, state: LeaderAndIsr, epoch_zk_version: int
    ) -> LeaderAndIsr | None:
        """Create the state znode (controller only, fenced by the epoch version); None if it exists."""
        path = paths.partition_state_path(topic, partition)
        self._call(self._zk.ensure_path, path.rsplit("/", 1)[0])
        tx = self._zk.transaction()
        tx.check(paths.CONTROLLER_EPOCH, epoch_zk_version)
        tx.create(path, _state_bytes(state))
        results = self._call(tx.commit)
        if any(isinstance(r, Exception) for r in results):
            if isinstance(results[0], BadVersionError):
                raise ControllerMovedError("controller epoch changed")
            return None
        return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, 0)

    def update_partition_state(
        self, topic: str, partition: int, state: LeaderAndIsr, epoch_zk_version: int | None = None
    ) -> LeaderAndIsr | None:
        """Conditional write on ``state.zk_version``; the stored state (new version) or None on conflict.

        With ``epoch_zk_version`` (controller writes) the transaction also checks /controller_epoch and
        raises `ControllerMovedError` if another controller has been elected since.
        """
        if epoch_zk_version is not None:
            return self.update_partition_states([((topic, partition), state)], epoch_zk_version)[
                (topic, partition)
            ]
        path = paths.partition_state_path(topic, partition)
        try:
            stat = self._call(self._zk.set, path, _state_bytes(state), state.zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return LeaderAndIsr(
            state.leader, state.leader_epoch, state.isr, state.controller_epoch, int(stat.version)
        )

    def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        self._call(
            self._zk.create,
            f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_",
            paths.encode_isr_change(partitions),
            sequence=True,
        )

    def read_and_delete_isr_changes(self, children: list[str]) -> set[tuple[str, int]]:
        changed: set[tuple[str, int]] = set()
        nodes = [f"{paths.ISR_CHANGE_NOTIFICATION}/{child}" for child in children]
        for found in self.get_many(nodes):
            if found is not None:
                changed.update(paths.decode_isr_change(found[0]))
        for chunk in chunks(nodes, len):
            tx = self._zk.transaction()
            for node in chunk:
                tx.delete(node)
            self._commit(tx, len(chunk))  # a notification deleted meanwhile fails only its chunk
        return changed

    # in bulk -----------------------------------------------------------------------------------------
    def get_many(
        self, nodes: Sequence[str], watches: Sequence[Callable[[Any], None]] | None = None
    ) -> list[Any]:
        """``(data, stat)`` or None (no such node) for each path, read with pipelined requests; with
        ``watches`` (one per node), each read leaves a data watch calling its own."""
        if not self._zk.connected:
            raise ZkError("get_many: not connected to ZooKeeper")
        found: list[Any] = []
        started = time.perf_counter()
        for start in range(0, len(nodes), PIPELINE_WINDOW):
            window = [
                self._zk.get_async(nodes[i], watch=None if watches is None else watches[i])
                for i in range(start, min(start + PIPELINE_WINDOW, len(nodes)))
            ]
            for pending in window:
                try:
                    data, stat = pending.get(timeout=BULK_TIMEOUT_S)
                    found.append((bytes(data), stat))
                except NoNodeError:
                    found.append(None)
                except (KazooException, KazooTimeoutError) as exc:
                    raise ZkError(f"reading {len(nodes)} znodes: {exc!r}") from exc
        self.stats.add(False, started, len(nodes))
        return found

    def get_partition_states(
        self, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Every partition's state znode (None where absent), with pipelined reads."""
        found = self.get_many([paths.partition_state_path(t, p) for t, p in tps])
        return {
            tp: None if got is None else _decode(got[0], int(got[1].version))
            for tp, got in zip(tps, found, strict=True)
        }

    def _commit(self, tx: Any, ops: int) -> list[Any]:
        if not self._zk.connected:
            raise ZkError("multi: not connected to ZooKeeper")
        started = time.perf_counter()
        try:
            return list(tx.commit())
        except (KazooException, KazooTimeoutError) as exc:
            raise ZkError(f"multi of {ops} operations: {exc!r}") from exc
        finally:
            self.stats.add(True, started, ops)

    def _fenced_multi(
        self,
        items: Sequence[tuple[TopicPartition, LeaderAndIsr]],
        epoch_zk_version: int,
        add: Callable[[Any, TopicPartition, LeaderAndIsr], int],
        stored_version: Callable[[Any], int],
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Write ``items`` in chunked multis, each first checking ``/controller_epoch``; ``add`` puts an
        item's operations into a transaction and returns how many it added (the item's result is its
        last operation's). A multi that fails on one item's conflict is not tried again as a whole
        (each retry would find one more conflict among leaders' concurrent ISR writes): its other items
        go as single fenced transactions, pipelined, each succeeding or conflicting on its own."""
        outcome: dict[TopicPartition, LeaderAndIsr | None] = {}

        def size(item: tuple[TopicPartition, LeaderAndIsr]) -> int:
            return 2 * len(paths.partition_state_path(*item[0])) + 96

        def stored(state: LeaderAndIsr, result: Any) -> LeaderAndIsr:
            return LeaderAndIsr(
                state.leader, state.leader_epoch, state.isr, state.controller_epoch, stored_version(result)
            )

        for chunk in chunks(items, size):
            tx = self._zk.transaction()
            tx.check(paths.CONTROLLER_EPOCH, epoch_zk_version)
            op_counts = [add(tx, tp, state) for tp, state in chunk]
            results = self._commit(tx, len(tx.operations))
            if isinstance(results[0], BadVersionError):
                raise ControllerMovedError("controller epoch changed")
            failed = _failed_item(results, op_counts)
            if failed is None:
                position = 1
                for (tp, state), count in zip(chunk, op_counts, strict=True):
                    position += count
                    outcome[tp] = stored(state, results[position - 1])
                continue
            retry, (conflicted, _) = split_failed(chunk, failed)
            outcome[conflicted] = None
            for (tp, state), result in zip(
                retry, self._fenced_each(retry, epoch_zk_version, add), strict=True
            ):
                outcome[tp] = None if result is None else stored(state, result)
        return outcome

    def _fenced_each(
        self,
        items: Sequence[tuple[TopicPartition, LeaderAndIsr]],
        epoch_zk_version: int,
        add: Callable[[Any, TopicPartition, LeaderAndIsr], int],
    ) -> list[Any]:
        """One fenced transaction per item, pipelined; per item its last result, or None (conflict)."""
        found: list[Any] = []
        started = time.perf_counter()
        for start in range(0, len(items), PIPELINE_WINDOW):
            window = []
            for tp, state in items[start : start + PIPELINE_WINDOW]:
                tx = self._zk.transaction()
                tx.check(paths.CONTROLLER_EPOCH, epoch_zk_version)
                add(tx, tp, state)
                window.append(tx.commit_async())
            for pending in window:
                try:
                    results = pending.get(timeout=BULK_TIMEOUT_S)
                except (KazooException, KazooTimeoutError) as exc:
                    raise ZkError(f"writing {len(items)} znodes: {exc!r}") from exc
                if isinstance(results[0], BadVersionError):
                    raise ControllerMovedError("controller epoch changed")
                found.append(None if any(isinstance(r, Exception) for r in results) else results[-1])
        self.stats.add(True, started, len(items))
        return found

    def update_partition_states(
        self, updates: Sequence[tuple[TopicPartition, LeaderAndIsr]], epoch_zk_version: int
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Conditional writes (each on its ``zk_version``) in fenced multis; per partition the stored
        state or None on conflict."""

        def add(tx: Any, tp: TopicPartition, state: LeaderAndIsr) -> int:
            tx.set_data(paths.partition_state_path(*tp), _state_bytes(state), state.zk_version)
            return 1

        return self._fenced_multi(updates, epoch_zk_version, add, lambda stat: int(stat.version))

    def create_partition_states(
        self, creates: Sequence[tuple[TopicPartition, LeaderAndIsr]], epoch_zk_version: int
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Create state znodes in fenced multis; None where one exists. Each multi also creates the
        missing ``partitions/<p>`` parents of its states; the topics' ``partitions`` parents are made
        first (structure only, so not fenced)."""
        for parent in sorted({f"{paths.topic_path(tp[0])}/partitions" for tp, _ in creates}):
            self._call(self._zk.ensure_path, parent)
        dirs = [paths.partition_state_path(*tp).rsplit("/", 1)[0] for tp, _ in creates]
        missing = {d for d, found in zip(dirs, self._exists_many(dirs), strict=True) if not found}

        def add(tx: Any, tp: TopicPartition, state: LeaderAndIsr) -> int:
            path = paths.partition_state_path(*tp)
            parent = path.rsplit("/", 1)[0]
            if parent in missing:
                tx.create(parent)
            tx.create(path, _state_bytes(state))
            return 2 if parent in missing else 1

        return self._fenced_multi(creates, epoch_zk_version, add, lambda _created: 0)

    def _exists_many(self, nodes: Sequence[str]) -> list[bool]:
        if not self._zk.connected:
            raise ZkError("exists: not connected to ZooKeeper")
        started = time.perf_counter()
        found: list[bool] = []
        for start in range(0, len(nodes), PIPELINE_WINDOW):
            window = [self._zk.exists_async(node) for node in nodes[start : start + PIPELINE_WINDOW]]
            try:
                found.extend(pending.get(timeout=BULK_TIMEOUT_S) is not None for pending in window)
            except (KazooException, KazooTimeoutError) as exc:
                raise ZkError(f"checking {len(nodes)} znodes: {exc!r}") from exc
        self.stats.add(False, started, len(nodes))
        return found
