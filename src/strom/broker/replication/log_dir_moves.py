"""AlterReplicaLogDirs (KIP-113): moving a hosted replica to another of this broker's log dirs.

Theory of operation (Kafka's ``ReplicaManager.alterReplicaLogDirs``, with strom.storage.log_move's
copy in place of Kafka's future-replica fetcher). For each (partition, dir) asked:

- a dir that is not one of ``log.dirs`` is LOG_DIR_NOT_FOUND, an offline one KAFKA_STORAGE_ERROR;
- a partition this broker does not host is remembered: when it is created here it goes to that dir
  (`LogManager.preferred_dirs`), and the answer is REPLICA_NOT_AVAILABLE, as Kafka answers;
- a replica already in that dir: nothing to do (a move elsewhere under way is cancelled);
- otherwise a move starts (one at a time per partition; a move to another dir replaces it) and the
  answer is NONE at once: the move runs in the background. Its copy runs in a worker thread in rounds
  until what is left is small, the copy is fsynced there too, then the swap (`LogManager.finish_move`:
  the close, the small delta, the renames) runs on the event loop, where no request touches the log,
  and the partition takes the moved log; the source's old files are removed in a worker thread. A move
  whose partition went away or got another log meanwhile (deleted, recreated) is dropped. A failed
  swap leaves the partition on the complete replica that remains. DescribeLogDirs lists a replica being
  moved under its destination with ``is_future_key`` (its size: the bytes copied so far; its offset
  lag: the whole log, as no offset of the copy counts as caught up before the swap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Iterator, Mapping

from strom.broker.replication.partition import Partition
from strom.protocol.errors import ErrorCode
from strom.storage.checkpoint import TopicPartition
from strom.storage.log_dirs import LogDirUsage
from strom.storage.log_manager import LogManager
from strom.storage.log_move import Copied, copy_changed, fsync_copy, future_dir

log = logging.getLogger(__name__)

__all__ = ["LogDirMoves"]

# Copy rounds in the worker thread stop once a round copied less than this (or after _ROUNDS rounds):
# the rest is copied on the event loop, during the swap.
_SMALL_DELTA = 4 << 20
_ROUNDS = 5


class _Move:
    __slots__ = ("copied", "copied_bytes", "dest", "future", "task")

    def __init__(self, dest: str, future: str) -> None:
        self.dest = dest
        self.future = future
        self.copied: Copied = {}  # the worker thread's, until its round is over
        self.copied_bytes = 0  # what DescribeLogDirs shows, updated on the event loop
        self.task: asyncio.Task[None] | None = None


class LogDirMoves:
    """The replica moves between log dirs under way on this broker; see the module docstring."""

    def __init__(self, log_manager: LogManager, partitions: Mapping[tuple[str, int], Partition]) -> None:
        self._log_manager = log_manager
        self._partitions = partitions  # the replica manager's hosted partitions (a live view)
        self._moves: dict[TopicPartition, _Move] = {}

    def alter(self, tp: TopicPartition, path: str) -> ErrorCode:
        """Start moving ``tp``'s replica to the log dir ``path``; the partition's error code."""
        dest = os.path.abspath(path)
        manager = self._log_manager
        if dest not in manager.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if dest in manager.offline_dirs:
            return ErrorCode.KAFKA_STORAGE_ERROR
        part = self._partitions.get(tp)
        if part is None:
            manager.preferred_dirs[tp] = dest
            return ErrorCode.REPLICA_NOT_AVAILABLE
        under_way = self._moves.get(tp)
        if under_way is not None:
            if under_way.dest == dest:
                return ErrorCode.NONE
            self._cancel(tp)
        if manager.log_dir_of(tp) == dest:
            return ErrorCode.NONE
        move = _Move(dest, future_dir(dest, os.path.basename(part.log.dir)))
        self._moves[tp] = move
        move.task = asyncio.get_running_loop().create_task(self._run(tp, part, move))
        log.info("moving %s-%d to %s", tp.topic, tp.partition, dest)
        return ErrorCode.NONE

    def futures(self) -> Iterator[tuple[str, TopicPartition, int]]:
        """(destination dir, partition, bytes copied so far) of each move under way."""
        for tp, move in self._moves.items():
            yield move.dest, tp, move.copied_bytes

    def describe(self) -> list[LogDirUsage]:
        """DescribeLogDirs: this broker's log dirs, each with its partition replicas' sizes and lags,
        and the replicas being moved into it."""
        usages = self._log_manager.describe_dirs()
        by_path = {usage.path: usage for usage in usages}
        for dest, tp, copied in self.futures():
            part = self._partitions.get(tp)
            lag = 0 if part is None else part.log.log_end_offset  # Kafka: the future log's lag behind
            by_path[dest].futures.append((tp, copied, lag))
        return usages

    async def _run(self, tp: TopicPartition, part: Partition, move: _Move) -> None:
        plog = part.log
        try:
            for _ in range(_ROUNDS):
                copied = await asyncio.to_thread(copy_changed, plog.dir, move.future, move.copied)
                move.copied_bytes += copied
                if copied < _SMALL_DELTA:
                    break
            await asyncio.to_thread(fsync_copy, move.future)
            if self._partitions.get(tp) is not part or part.log is not plog:
                raise _Dropped
            moved, error, doomed = self._log_manager.finish_move(tp, move.future, move.copied)
            part.log = moved
            if error is not None:
                log.error("moving %s-%d to %s failed: %s", tp.topic, tp.partition, move.dest, error)
            if doomed is not None:
                await asyncio.to_thread(shutil.rmtree, doomed, True)
        except _Dropped:
            log.info("move of %s-%d dropped: the replica went away meanwhile", tp.topic, tp.partition)
            shutil.rmtree(move.future, ignore_errors=True)
        except OSError as exc:
            log.error("moving %s-%d to %s failed: %s", tp.topic, tp.partition, move.dest, exc)
            shutil.rmtree(move.future, ignore_errors=True)
        except Exception:  # nobody awaits this task: an unexpected error is logged here, not lost
            log.exception("moving %s-%d to %s failed", tp.topic, tp.partition, move.dest)
            shutil.rmtree(move.future, ignore_errors=True)
        finally:
            if self._moves.get(tp) is move:
                del self._moves[tp]

    def _cancel(self, tp: TopicPartition) -> None:
        move = self._moves.pop(tp)
        if move.task is not None:
            move.task.cancel()
        # A copy still running in its thread may write on: the next start removes what it leaves.
        shutil.rmtree(move.future, ignore_errors=True)

    async def stop(self) -> None:
        tasks = [move.task for move in self._moves.values() if move.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Dropped(Exception):
    """The partition went away or got another log during the copy."""
