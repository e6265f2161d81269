"""`GroupCoordinator`: the one object the broker talks to for groups and committed offsets.

It combines membership (`membership.py`: join, sync, heartbeat, leave, timers) with committed offsets
and the admin operations (describe, list, delete groups, delete offsets), all over one `GroupStore`.

Offset commits follow Kafka's `GroupCoordinator.handleCommitOffsets`:

* generation -1 with an empty member id is a *standalone* commit (a consumer using ``assign()``, or a
  tool): accepted for a group that does not exist yet (it is created Empty) or is Empty;
* otherwise the committer must be a current member (UNKNOWN_MEMBER_ID), of the current generation
  (ILLEGAL_GENERATION), not a fenced static incarnation (FENCED_INSTANCE_ID); during CompletingRebalance
  commits get REBALANCE_IN_PROGRESS (the member is about to get a new assignment), during
  PreparingRebalance they are still accepted so that a consumer can commit before it rejoins;
* metadata longer than `offset.metadata.max.bytes` is OFFSET_METADATA_TOO_LARGE, per partition;
* a consumer group (KIP-848) decides by member epoch instead (`consumer_commit_check`, set by the
  broker, which holds those groups).

Transactional commits (TxnOffsetCommit, KIP-447) are checked by `txn_commit_error` as Kafka's
``validateOffsetCommit`` does for them: a request without group metadata (generation -1, empty member
id, no instance id: TxnOffsetCommit below v3, or a producer that has none) passes unchecked; with it,
a fenced static incarnation is FENCED_INSTANCE_ID, an unknown member UNKNOWN_MEMBER_ID and another
generation ILLEGAL_GENERATION, so a zombie consumer's offsets cannot be committed after a rebalance.

Accepted offsets are appended to `__consumer_offsets` first and applied in memory only once the append
returned, so a commit is acknowledged only when it would survive a restart.

Offsets expire (`offsets.retention.minutes`, KIP-211): a group with a protocol loses all its offsets once
it has been Empty for the retention time; a standalone group loses each offset once its commit is older
than that. A group with neither members nor offsets left is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from strom._util.clock import Clock
from strom.coordinator.group import Group
from strom.coordinator.membership import GroupConfig, GroupMembership
from strom.coordinator.messages import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    GroupSummary,
    JoinCallback,
    JoinGroupRequest,
    ListedGroup,
    OffsetAndMetadata,
    SyncCallback,
    SyncGroupRequest,
    TopicPartition,
)
from strom.coordinator.ports import PartitionWriter, Scheduler
from strom.coordinator.state import GroupState
from strom.coordinator.store import GroupStore
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

OffsetFetchResult = dict[TopicPartition, OffsetAndMetadata | None]


class GroupCoordinator:
    def __init__(
        self,
        config: GroupConfig,
        clock: Clock,
        scheduler: Scheduler,
        writer: PartitionWriter,
        num_partitions: int,
    ) -> None:
        self.config = config
        self.clock = clock
        self.store = GroupStore(writer, num_partitions)
        self.membership = GroupMembership(config, clock, scheduler, self.store)
        # Set by the broker: whether a commit to a consumer group (KIP-848) may go ahead, by
        # (group id, member id, member epoch); None when the group is not one.
        self.consumer_commit_check: Callable[[str, str, int], ErrorCode | None] | None = None
        # Set by the broker: the consumer groups (KIP-848) it coordinates, listed with the classic ones.
        self.consumer_listing: Callable[[], list[ListedGroup]] | None = None
        # Set by the broker: DeleteGroups of a consumer group (None: there is no such consumer group).
        self.consumer_delete: Callable[[str], ErrorCode | None] | None = None

    @property
    def groups(self) -> dict[str, Group]:
        return self.store.groups

    def partition_for(self, group_id: str) -> int:
        return self.store.partition_of(group_id)

    # --- loading -------------------------------------------------------------------------------
    def load(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        """Replay `__consumer_offsets` records (in log order) at start-up, then arm session timers."""
        now = self.clock.monotonic_ms()
        count = 0
        for key, value in records:
            self.store.replay(key, value, now)
            count += 1
        self.membership.arm_loaded_members()
        log.info("loaded %d group(s) from %d __consumer_offsets record(s)", len(self.groups), count)

    def load_partition(self, partition: int, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
        """Cluster mode, on becoming leader of a `__consumer_offsets` partition: its groups are rebuilt
        from ``records`` (that partition's log, in order) alone. Whatever memory still held for them from
        an earlier leadership is dropped first: the log is the truth (it may have been truncated or
        extended by another coordinator meanwhile). Returns how many groups were loaded."""
        self.unload_partition(partition)
        now = self.clock.monotonic_ms()
        for key, value in records:
            self.store.replay(key, value, now)
        return self.loaded_partition(partition)

    def loaded_partition(self, partition: int) -> int:
        """Every record of a `__consumer_offsets` partition is replayed (`store.replay`): its loaded
        members get their session timers. Returns how many groups the partition holds."""
        loaded = [g for gid, g in self.groups.items() if self.store.partition_of(gid) == partition]
        self.membership.arm_loaded_members(loaded)
        log.info("loaded %d group(s) of __consumer_offsets-%d", len(loaded), partition)
        return len(loaded)

    def unload_partition(self, partition: int) -> int:
        """Cluster mode, on losing leadership of a `__consumer_offsets` partition: forget its groups
        (parked joins and syncs get NOT_COORDINATOR, timers stop). Returns how many were unloaded."""
        doomed = [gid for gid in self.groups if self.store.partition_of(gid) == partition]
        for group_id in doomed:
            self.membership.unload_group(group_id)
            self.store.forget(group_id)
        if doomed:
            log.info("unloaded %d group(s) of __consumer_offsets-%d", len(doomed), partition)
        return len(doomed)

    # --- membership ----------------------------------------------------------------------------
    def join_group(self, req: JoinGroupRequest, respond: JoinCallback) -> None:
        self.membership.join_group(req, respond)

    def sync_group(self, req: SyncGroupRequest, respond: SyncCallback) -> None:
        self.membership.sync_group(req, respond)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None
    ) -> ErrorCode:
        return self.membership.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        return self.membership.leave_group(group_id, members)

    # --- offsets -------------------------------------------------------------------------------
    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetAndMetadata],
    ) -> dict[TopicPartition, ErrorCode]:
        if not group_id:
            return dict.fromkeys(offsets, ErrorCode.INVALID_GROUP_ID)
        error = self._commit_error(group_id, generation_id, member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return dict.fromkeys(offsets, error)
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self.clock.time_ms()
        for tp, om in offsets.items():
            if len(om.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = OffsetAndMetadata(om.offset, om.leader_epoch, om.metadata, now)
        try:
            self.store.store_offsets(group_id, accepted)
        except KafkaError as exc:
            log.warning("group %s: offset commit failed: %s", group_id, exc)
            code = exc.code
            if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
                code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
            elif code is not ErrorCode.NOT_COORDINATOR:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            results.update(dict.fromkeys(accepted, code))
            return results
        group = self.store.get(group_id)
        if group is not None:
            member = group.members.get(member_id)
            if member is not None:
                # A commit is a sign of life too (Kafka reschedules the heartbeat on commits).
                self.membership.keep_alive(group, member)
        results.update(dict.fromkeys(accepted, ErrorCode.NONE))
        return results

    def _commit_error(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if self.consumer_commit_check is not None:
            verdict = self.consumer_commit_check(group_id, member_id, generation_id)
            if verdict is not None:
                return verdict
        group = self.store.get(group_id)
        if group is None:
            # No group yet: only a standalone commit may create one.
            return ErrorCode.NONE if generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.NONE
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def txn_commit_error(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Whether a TxnOffsetCommit's group metadata lets it commit (see the module docstring)."""
        if generation_id < 0 and member_id == UNKNOWN_MEMBER_ID and group_instance_id is None:
            return ErrorCode.NONE
        group = self.store.get(group_id)
        if group is None:
            # Kafka creates the group Empty at generation 0 for a transactional commit.
            if member_id != UNKNOWN_MEMBER_ID:
                return ErrorCode.UNKNOWN_MEMBER_ID
            return ErrorCode.NONE if generation_id == 0 else ErrorCode.ILLEGAL_GENERATION
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id != UNKNOWN_MEMBER_ID and not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None) -> OffsetFetchResult:
        """Committed offsets (None where nothing is committed); ``partitions=None`` means all of them."""
        group = self.store.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: drop committed offsets of topics the group is not consuming."""
        group = self.store.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.NON_EMPTY_GROUP, {}
            subscribed = topics
        results = {
            tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp.topic in subscribed else ErrorCode.NONE
            for tp in partitions
        }
        deletable = [tp for tp, code in results.items() if code is ErrorCode.NONE and tp in group.offsets]
        try:
            self.store.delete_offsets(group_id, deletable)
        except KafkaError as exc:
            return exc.code, {}
        return ErrorCode.NONE, results

    def expire_offsets(self, partition: int | None = None) -> int:
        """Drop offsets past `offsets.retention.minutes` (of the groups in one `__consumer_offsets`
        ``partition``, or all); returns how many were removed."""
        now = self.clock.time_ms()
        retention = self.config.offsets_retention_ms
        removed = 0
        for group in list(self.groups.values()):
            if partition is not None and self.store.partition_of(group.group_id) != partition:
                continue
            expired = expired_offsets(group, now, retention)
            if expired:
                try:
                    self.store.delete_offsets(group.group_id, expired)
                except KafkaError as exc:
                    log.warning("group %s: could not expire offsets: %s", group.group_id, exc)
                    continue
                removed += len(expired)
            if group.is_(GroupState.EMPTY) and not group.offsets:
                self._delete_group(group)
        return removed

    # --- admin ---------------------------------------------------------------------------------
    def describe_group(self, group_id: str) -> GroupSummary:
        group = self.store.get(group_id)
        if group is None:
            # Kafka describes an unknown group as Dead with no error.
            return GroupSummary(group_id, GroupState.DEAD.kafka_name, "", "")
        return group.summary()

    def list_groups(self) -> list[ListedGroup]:
        """Classic groups, then the consumer groups (whose committed offsets live in a classic entry of
        the same id, which is not listed as a group of its own)."""
        consumer = self.consumer_listing() if self.consumer_listing is not None else []
        ids = {g.group_id for g in consumer}
        classic = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.kafka_name)
            for g in self.groups.values()
            if g.group_id not in ids
        ]
        return classic + consumer

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.store.get(group_id)
            consumer = self.consumer_delete(group_id) if self.consumer_delete and group_id else None
            if consumer is not None and (consumer is not ErrorCode.NONE or group is None):
                # A consumer group: refused while it has members, else gone (and its offsets below).
                results[group_id] = consumer
            elif not group_id:
                results[group_id] = ErrorCode.INVALID_GROUP_ID
            elif group is None:
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(GroupState.EMPTY):
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                results[group_id] = self._delete_group(group)
        return results

    def _delete_group(self, group: Group) -> ErrorCode:
        try:
            self.store.delete_group(group)
        except KafkaError as exc:
            return exc.code
        group.transition_to(GroupState.DEAD, self.clock.time_ms())
        self.membership.on_group_deleted(group.group_id)
        log.info("group %s deleted", group.group_id)
        return ErrorCode.NONE

    def shutdown(self) -> None:
        self.membership.shutdown()


def expired_offsets(group: Group, now_ms: int, retention_ms: int) -> list[TopicPartition]:
    """Which of a group's committed offsets `offsets.retention.minutes` has run out for (KIP-211)."""
    if group.is_(GroupState.EMPTY) and group.protocol_type is not None:
        if (
            group.current_state_timestamp_ms >= 0
            and group.current_state_timestamp_ms + retention_ms <= now_ms
        ):
            return list(group.offsets)
        return []
    if not group.uses_group_management:
        return [tp for tp, om in group.offsets.items() if om.commit_timestamp_ms + retention_ms <= now_ms]
    return []


__all__ = ["NO_GENERATION", "UNKNOWN_MEMBER_ID", "GroupConfig", "GroupCoordinator", "expired_offsets"]
