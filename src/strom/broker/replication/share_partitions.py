"""Share-partitions and share sessions on a partition's leader (KIP-932's SharePartitionManager).

Theory of operation. A share group's consumers fetch from each partition's leader with ShareFetch,
never from a follower. The leader keeps, per (group, partition), a `SharePartition`
(`strom.coordinator.share.partition`: start offset, in-flight records, states, delivery counts,
locks), loaded on the group's first fetch of the partition (see "Kept" below). It is bound to the
leader epoch it was loaded at: after a leadership change it is loaded again.

Each member has a **share session** per leader: opened by a ShareFetch with epoch 0 and the
partitions it wants, then each request carries the next epoch (1, 2, ...) and only the partitions to
add or forget; a request with -1 closes the session and releases what the member holds on its
partitions. A wrong epoch answers INVALID_SHARE_SESSION_EPOCH, an unknown session
SHARE_SESSION_NOT_FOUND (the client opens a new one). The sessions live in a bounded
`ShareSessionCache` (`strom.coordinator.share.sessions`): a session unused (at its right epoch) for
the group's session timeout is evicted by `evict_idle`, which the handlers call before looking up a
request's session, and what its member held is released as on a close (so a killed consumer's session
goes away); a new session when the cache is full of live ones answers SHARE_SESSION_LIMIT_REACHED.

`acquire_from_log` is one partition's share of a ShareFetch: the locks that ran out are released
first (the clock's monotonic time), then stored batches are read from the partition's first
acquirable offset, below the high watermark, and their headers (base offset, last offset delta,
control bit: nothing else is decoded) drive the acquisition. The response carries only the batches
that hold an acquired record; the client delivers only the acquired offsets of them.

Kept: the share-partitions live in this leader's memory and are made durable through the share
coordinator (a `SharePersister`: `__share_group_state`, strom.coordinator.share.state). The first use
of a (group, partition) at a leader epoch (`load`) reads the stored state: a new leader (after a
restart or a fail-over) carries on from the stored start offset with every undecided record AVAILABLE
at its delivery count (records that were ACQUIRED are handed out again, accepted and archived ones
never); with nothing stored, the share-partition starts at `share.auto.offset.reset`. The read stores
this leader's epoch at the share coordinator, so a deposed leader's writes are fenced from then on;
the state is also written back at once, so that a first start offset holds for the next leader too.
`persist` writes the state after a change that must outlive this leader (the acknowledgements, before
they are answered): one write at a time per share-partition, none when nothing durable changed since
the last. When an acknowledgement's write fails, its records are put back in memory as they were
(`SharePartition.roll_back`) and the acknowledgement is answered with the write's error, so memory
never says done what the share coordinator does not. Releases are written as they are
applied: a lock expiry's at the share-partition's next use, a closed or evicted session's at once (a
failed write is carried by the next).

Admin changes. AlterShareGroupOffsets and DeleteShareGroupOffsets change the stored state of a group
with no members (handlers/share_offsets_admin.py): a leader re-reads the group's share-partitions at
their next use once the group's last share session here is closed or evicted (`mark_unused`), and a
write refused with FENCED_STATE_EPOCH (a reset bumps the state epoch) does the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from strom._util.clock import Clock
from strom.broker.replication.replica_manager import ReplicaManager
from strom.coordinator.share.partition import AcquiredRange, SharePartition, Undo
from strom.coordinator.share.sessions import DEFAULT_MAX_SESSIONS, ShareSession, ShareSessionCache
from strom.coordinator.share.state import SharePersister, ShareState, restore, state_of
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.batch import iter_headers

__all__ = ["AcquireResult", "ShareConfig", "SharePartitionManager", "ShareSession"]

OPEN_EPOCH = 0
CLOSE_EPOCH = -1
# At most this much of a partition is read per acquisition (Kafka's max.partition.fetch.bytes default):
# each read starts at an acquirable record, so a smaller read still progresses, and a large MaxBytes
# does not make every fetch re-read the whole backlog behind the records it hands out.
READ_BYTES = 1 << 20

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ShareConfig:
    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    auto_offset_reset: str = "latest"
    session_timeout_ms: int = 45000
    max_share_sessions: int = DEFAULT_MAX_SESSIONS


@dataclass(frozen=True, slots=True)
class AcquireResult:
    records: bytes
    acquired: list[AcquiredRange]


@dataclass(slots=True)
class _Held:
    partition: SharePartition
    leader_epoch: int
    state_epoch: int = 0
    written: ShareState | None = None  # the state last made durable
    stale: bool = False  # read the stored state again at the next use (see `mark_unused`)
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)  # one write at a time


class SharePartitionManager:
    def __init__(
        self, replica_manager: ReplicaManager, clock: Clock, config: ShareConfig, persister: SharePersister
    ) -> None:
        self._rm = replica_manager
        self._clock = clock
        self.config = config
        self._persister = persister
        self._partitions: dict[tuple[str, str, int], _Held] = {}
        self._loading: dict[tuple[str, str, int], asyncio.Lock] = {}
        self.sessions = ShareSessionCache(config.max_share_sessions, config.session_timeout_ms)
        # A group's settings: its own configs (the GROUP resource; set by the broker), else `config`.
        self.config_of: Callable[[str], ShareConfig] = lambda _group_id: config

    # --- sessions ------------------------------------------------------------------------------
    def evict_idle(self) -> list[tuple[str, str, int]]:
        """Evict the sessions unused for the session timeout and release what their members held;
        the (group, topic, partition) keys released on (for the caller to wake waiting fetches)."""
        released: list[tuple[str, str, int]] = []
        for session in self.sessions.expire(self._clock.monotonic_ms()):
            self._release(session)
            released += [(session.group_id, topic, index) for topic, index in session.partitions]
        return released

    def session(self, group_id: str, member_id: str, epoch: int) -> tuple[ShareSession | None, ErrorCode]:
        """The member's session for a request at ``epoch`` (a new one at epoch 0); for -1 the session
        to close (the caller calls `close_session` after the acknowledgements)."""
        now = self._clock.monotonic_ms()
        if epoch == OPEN_EPOCH:
            opened = self.sessions.open(group_id, member_id, now)
            if opened is None:
                return None, ErrorCode.SHARE_SESSION_LIMIT_REACHED
            return opened, ErrorCode.NONE
        session = self.sessions.get(group_id, member_id)
        if session is None:
            return None, ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch == CLOSE_EPOCH:
            return session, ErrorCode.NONE
        if epoch != session.next_epoch:
            return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH
        self.sessions.touch(session, now)
        session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session, ErrorCode.NONE

    def close_session(self, session: ShareSession) -> None:
        """Forget the session and release what its member holds on its partitions."""
        self.sessions.remove(session)
        self._release(session)

    def _release(self, session: ShareSession) -> None:
        now = self._clock.monotonic_ms()
        for topic, index in session.partitions:
            held = self._partitions.get((session.group_id, topic, index))
            if held is not None:
                held.partition.expire_locks(now)
                held.partition.release_member(session.member_id)

    # --- share-partitions ----------------------------------------------------------------------
    async def load(
        self, group_id: str, topic: str, index: int, deadline_ms: int | None = None
    ) -> SharePartition:
        """The group's state of a partition this broker leads, read from the share coordinator on its
        first use at this leader epoch (made at the reset point and written if none is stored), its
        expired locks released; the share coordinator is waited for until ``deadline_ms`` (the
        request's).

        Raises:
            KafkaError: this broker does not lead the partition (NOT_LEADER_OR_FOLLOWER,
                UNKNOWN_TOPIC_OR_PARTITION), or the stored state could not be read or the first one
                written (the share coordinator's error).
        """
        key = (group_id, topic, index)
        part = self._rm.leader_partition(topic, index)
        held = self._partitions.get(key)
        if held is None or held.leader_epoch != part.leader_epoch or held.stale:
            async with self._loading.setdefault(key, asyncio.Lock()):
                held = await self._load(key, part.leader_epoch, deadline_ms)
        share = held.partition
        share.delivery_count_limit = self.config_of(group_id).delivery_count_limit
        if share.start_offset < part.log_start_offset:
            share.reset_start(part.log_start_offset)  # retention deleted records never delivered
        if share.expire_locks(self._clock.monotonic_ms()):
            await self._write(held, key, deadline_ms)  # the releases' counts (a failure: the next write)
        return share

    async def _load(self, key: tuple[str, str, int], leader_epoch: int, deadline_ms: int | None) -> _Held:
        group_id, topic, index = key
        held = self._partitions.get(key)
        if held is not None and held.leader_epoch == leader_epoch and not held.stale:
            return held  # loaded while this one waited
        if held is not None:
            async with held.writing:
                pass  # its last write lands before the read
        stored = await self._persister.read(group_id, topic, index, leader_epoch, deadline_ms)
        part = self._rm.leader_partition(topic, index)  # still the leader, at that epoch?
        if part.leader_epoch != leader_epoch:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{index}: leadership moved")
        group_config = self.config_of(group_id)
        limit = group_config.delivery_count_limit
        if stored is not None:
            held = _Held(restore(stored, limit), leader_epoch, stored.state_epoch)
        else:
            earliest = group_config.auto_offset_reset == "earliest"
            start = part.log_start_offset if earliest else part.high_watermark
            held = _Held(SharePartition(start, limit), leader_epoch)
        # Written at once: with this leader epoch stored, a deposed leader's writes are fenced, and
        # a first start offset holds for the next leader too.
        code = await self._write(held, key, deadline_ms)
        if code is not ErrorCode.NONE:
            raise KafkaError(code, f"{topic}-{index}: share state of {group_id} not written: {code.name}")
        self._partitions[key] = held
        return held

    async def persist(
        self, group_id: str, topic: str, index: int, deadline_ms: int | None = None
    ) -> ErrorCode:
        """Make the share-partition's state durable (NONE at once if nothing durable changed)."""
        held = self._partitions.get((group_id, topic, index))
        if held is None:
            return ErrorCode.NONE
        return await self._write(held, (group_id, topic, index), deadline_ms)

    async def _write(self, held: _Held, key: tuple[str, str, int], deadline_ms: int | None) -> ErrorCode:
        async with held.writing:
            state = state_of(held.partition, held.state_epoch, held.leader_epoch)
            if state == held.written:
                return ErrorCode.NONE
            code = await self._persister.write(key[0], key[1], key[2], state, deadline_ms)
            if code is ErrorCode.NONE:
                held.written = state
            elif code is ErrorCode.FENCED_STATE_EPOCH:
                held.stale = True  # an admin reset the stored state: carry on from it
            return code

    def mark_unused(self, group_ids: Iterable[str]) -> None:
        """The groups' share sessions here closed or were evicted: those of them left without any
        read their share-partitions' stored state again at the next use, so what an admin changed
        while the group was empty (AlterShareGroupOffsets, DeleteShareGroupOffsets) takes effect."""
        idle = {g for g in group_ids if not self.sessions.has_group(g)}
        for (group_id, _, _), held in self._partitions.items():
            if group_id in idle:
                held.stale = True

    def known(self, group_id: str, topic: str, index: int) -> SharePartition | None:
        held = self._partitions.get((group_id, topic, index))
        return None if held is None else held.partition

    def all_partitions(self) -> dict[tuple[str, str, int], SharePartition]:
        return {key: held.partition for key, held in self._partitions.items()}

    async def acquire_from_log(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        index: int,
        max_records: int,
        max_bytes: int,
        deadline_ms: int | None = None,
    ) -> AcquireResult:
        """Acquire up to about ``max_records`` records of the partition for the member (whole batches).

        Raises:
            KafkaError: as `load`, or the log read's error.
        """
        await self.load(group_id, topic, index, deadline_ms)
        share = self._current((group_id, topic, index)).partition  # as it is after load's awaits
        part = self._rm.leader_partition(topic, index)
        if max_records <= 0 or not share.has_available(part.high_watermark):
            return AcquireResult(b"", [])
        offset = share.fetch_offset()
        data = self._rm.fetch_records(topic, index, -1, offset, max(min(max_bytes, READ_BYTES), 1), True)[0]
        buf = data.read_bytes()
        headers = list(iter_headers(buf))
        acquired = share.acquire(
            member_id,
            ((h.base_offset, h.last_offset, h.is_control) for _, h in headers),
            max_records,
            self._clock.monotonic_ms(),
            self.config_of(group_id).record_lock_duration_ms,
        )
        if not acquired:
            return AcquireResult(b"", [])
        # Only the batches holding an acquired record go back to the client.
        chunks: list[bytes] = []
        ranges = [(r.first_offset, r.last_offset) for r in acquired]
        for pos, h in headers:
            if not h.is_control and any(f <= h.last_offset and h.base_offset <= la for f, la in ranges):
                chunks.append(buf[pos : pos + h.size])
        return AcquireResult(b"".join(chunks), acquired)

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        index: int,
        batches: list[tuple[int, int, list[int]]],
        deadline_ms: int | None = None,
    ) -> ErrorCode:
        """Apply acknowledgement batches ``(first, last, types)`` to the partition and make them
        durable; the first error (a verdict's, else the write's). A failed write puts the records back
        as they were (``roll_back``): the member may acknowledge them again, or they come back when
        their locks run out, as the stored state says."""
        key = (group_id, topic, index)
        try:
            await self.load(group_id, topic, index, deadline_ms)
            held = self._current(key)
        except KafkaError as exc:
            return exc.code
        # No await from here to the write: the verdicts apply to the share-partition as it is now
        # (load's awaits may have replaced it, or let a lock run out and another member acquire).
        error = ErrorCode.NONE
        undo = Undo()
        for first, last, types in batches:
            code = held.partition.acknowledge(member_id, first, last, types, undo)
            if code is not ErrorCode.NONE and error is ErrorCode.NONE:
                error = code
        written = await self._write(held, key, deadline_ms)
        if written is not ErrorCode.NONE:
            held.partition.roll_back(undo)
            return written
        return error

    def _current(self, key: tuple[str, str, int]) -> _Held:
        """The loaded share-partition of ``key`` at this broker's current leader epoch.

        Raises:
            KafkaError: not (or no longer) loaded at this leader epoch (NOT_LEADER_OR_FOLLOWER).
        """
        part = self._rm.leader_partition(key[1], key[2])
        held = self._partitions.get(key)
        if held is None or held.leader_epoch != part.leader_epoch:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{key[1]}-{key[2]}: leadership moved")
        return held

    def backlog(self, group_id: str, topic: str, index: int) -> int:
        """Records of the partition the group has not finished: from its start offset to the high
        watermark, less those acknowledged or archived in flight (0 for a partition it never read)."""
        held = self._partitions.get((group_id, topic, index))
        part = self._rm.partitions.get((topic, index))
        if held is None or part is None:
            return 0
        share = held.partition
        done = sum(1 for r in share.in_flight.values() if r.state.value in ("ACKNOWLEDGED", "ARCHIVED"))
        return max(part.high_watermark - share.start_offset - done, 0)
