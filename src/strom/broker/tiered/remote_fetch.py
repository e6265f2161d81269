"""The fetch handler's remote reads: partitions of a consumer's Fetch whose offset is below the local log
start, answered from remote storage (Kafka's ``DelayedRemoteFetch``).

`_read_all` in handlers/fetch.py notes such a partition (its local read answered OFFSET_OUT_OF_RANGE and
the broker has a remote log manager) instead of answering the error; the handler then awaits
`complete_remote_reads`, which reads every noted partition concurrently, all within
``remote.fetch.max.wait.ms`` on the broker's clock. Outcomes per partition: the batches read (error
NONE); OFFSET_OUT_OF_RANGE as before when the remote log does not hold the offset either; KAFKA_STORAGE_ERROR
(retriable: clients retry) when the object store fails; an empty answer without error when the time is up
(the consumer fetches again, and the chunks already read are cached). A read_committed consumer gets
the aborted transactions of what it reads (the remote transaction indexes, remote_log_manager.py). A
broker without tiered storage never gets here: the note is taken only on the error path, never for a
local read.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from strom._util.clock import Clock, Deadline
from strom.broker.replication.partition import Partition
from strom.broker.tiered.remote_log_manager import RemoteLogManager
from strom.objectstore.store import ObjectStoreError
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import FetchResponsePartitionData


@dataclass
class PendingRemoteRead:
    entry: FetchResponsePartitionData  # the answer to fill in (holds OFFSET_OUT_OF_RANGE until then)
    part: Partition
    fetch_offset: int
    max_bytes: int
    read_committed: bool = False


async def _complete(rlm: RemoteLogManager, pending: PendingRemoteRead) -> None:
    part, entry = pending.part, pending.entry
    try:
        data, aborted = await rlm.read_remote(
            part, pending.fetch_offset, max(pending.max_bytes, 1), pending.read_committed
        )
    except KafkaError as exc:
        entry["error_code"] = int(exc.code)
        return
    except ObjectStoreError:
        entry["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
        return
    entry["error_code"] = int(ErrorCode.NONE)
    entry["records"] = data
    if aborted is not None:
        entry["aborted_transactions"] = [
            {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted
        ]
    entry["high_watermark"] = part.high_watermark
    entry["last_stable_offset"] = part.last_stable_offset
    start = rlm.log_start(part)
    entry["log_start_offset"] = start[0] if start is not None else part.log_start_offset


async def complete_remote_reads(
    rlm: RemoteLogManager, clock: Clock, pending: list[PendingRemoteRead]
) -> None:
    tasks = [asyncio.ensure_future(_complete(rlm, p)) for p in pending]
    try:
        async with Deadline(clock, rlm.remote_fetch_max_wait_ms):
            await asyncio.gather(*tasks)
    except TimeoutError:
        for task, p in zip(tasks, pending, strict=True):
            # The deadline cancelled the gather, which cancels the reads still running and ends only
            # once they have ended: a read cut short is a cancelled task here, not an unfinished one.
            # Its entry still holds the OFFSET_OUT_OF_RANGE placeholder, which a consumer would take
            # for "not in the log" and reset its position to the log end, skipping the records.
            if task.cancelled() or not task.done():
                task.cancel()
                # Time is up: an empty answer, the consumer asks again (its chunks stay cached).
                p.entry["error_code"] = int(ErrorCode.NONE)
                p.entry["records"] = b""
                p.entry["high_watermark"] = p.part.high_watermark
                p.entry["last_stable_offset"] = p.part.last_stable_offset
