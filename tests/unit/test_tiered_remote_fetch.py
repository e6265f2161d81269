"""The fetch handler's remote reads within ``remote.fetch.max.wait.ms`` (strom.broker.tiered.remote_fetch),
over a remote log manager whose reads answer at once or wait on an object store that does not answer
yet (retrying a failed request), on a manual clock."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from strom._util.clock import ManualClock, yield_to_loop
from strom.broker.handlers.fetch import _empty
from strom.broker.replication.partition import Partition
from strom.broker.tiered.remote_fetch import PendingRemoteRead, complete_remote_reads
from strom.broker.tiered.remote_log_manager import RemoteLogManager
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import FetchResponsePartitionData

MAX_WAIT_MS = 500


class _Manager:
    """What of a `RemoteLogManager` the remote reads use: offsets below ``stalled_from`` read at once,
    those at or above it wait for ``store_answers`` (an object store still retrying)."""

    remote_fetch_max_wait_ms = MAX_WAIT_MS

    def __init__(self, stalled_from: int) -> None:
        self.stalled_from = stalled_from
        self.store_answers = asyncio.Event()
        self.cancelled = 0

    async def read_remote(
        self, part: Partition, fetch_offset: int, max_bytes: int, read_committed: bool = False
    ) -> tuple[bytes, None]:
        if fetch_offset >= self.stalled_from:
            try:
                await self.store_answers.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return b"batches from %d" % fetch_offset, None

    def log_start(self, part: Partition) -> tuple[int, int] | None:
        return (0, 0)


def _pending(offset: int) -> tuple[PendingRemoteRead, FetchResponsePartitionData]:
    # As the fetch handler notes it: the local read's OFFSET_OUT_OF_RANGE, to be replaced by the answer.
    entry = _empty(0, ErrorCode.OFFSET_OUT_OF_RANGE, log_start=980)
    part: Any = SimpleNamespace(high_watermark=1200, last_stable_offset=1200, log_start_offset=980)
    return PendingRemoteRead(entry, cast(Partition, part), offset, 1 << 20), entry


def test_a_remote_read_past_the_max_wait_answers_empty_not_out_of_range() -> None:
    """CI failure of test_tiered_fault_proxy: with 30% of S3 requests failing, a remote read at offset
    140 outlasted remote.fetch.max.wait.ms (botocore retrying); the time limit cancelled it, and the
    answer kept the local read's OFFSET_OUT_OF_RANGE, so librdkafka reset the consumer to the log end
    although the records were in remote storage. A read cut short must answer empty, without error."""

    async def scenario() -> None:
        clock = ManualClock()
        manager = _Manager(stalled_from=140)
        quick, quick_entry = _pending(0)
        slow, slow_entry = _pending(140)
        done = asyncio.ensure_future(
            complete_remote_reads(cast(RemoteLogManager, manager), clock, [quick, slow])
        )
        for _ in range(5):
            await yield_to_loop()
        assert not done.done()  # the read at 140 waits for the store
        clock.advance(MAX_WAIT_MS)
        await asyncio.wait_for(done, 5)
        assert manager.cancelled == 1  # the time limit cut the stalled read short
        assert (quick_entry["error_code"], quick_entry["records"]) == (0, b"batches from 0")
        assert quick_entry["log_start_offset"] == 0
        assert slow_entry["error_code"] == int(ErrorCode.NONE), ErrorCode(slow_entry["error_code"]).name
        assert slow_entry["records"] == b""
        assert (slow_entry["high_watermark"], slow_entry["last_stable_offset"]) == (1200, 1200)

    asyncio.run(scenario())


def test_remote_reads_within_the_max_wait_answer_their_batches() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        manager = _Manager(stalled_from=140)
        slow, slow_entry = _pending(140)
        done = asyncio.ensure_future(complete_remote_reads(cast(RemoteLogManager, manager), clock, [slow]))
        for _ in range(5):
            await yield_to_loop()
        clock.advance(MAX_WAIT_MS - 1)
        manager.store_answers.set()  # the store answers just in time
        await asyncio.wait_for(done, 5)
        assert manager.cancelled == 0
        assert (slow_entry["error_code"], slow_entry["records"]) == (0, b"batches from 140")
        assert slow_entry["log_start_offset"] == 0

    asyncio.run(scenario())
