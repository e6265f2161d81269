"""Groups in memory, and their persistence as `__consumer_offsets` records (layouts in `records.py`).

Write path: the coordinator changes a group only *after* the record describing the change has been
appended (`PartitionWriter.append` returned); if the append fails, memory is left as it was and the error
goes back to the client. So an acknowledged commit is always in the log, and memory never holds what
the log does not.

Read path (broker start): `replay(key, value)` is fed every record of every `__consumer_offsets`
partition, in offset order. Offsets are last-writer-wins per (group, topic, partition), a tombstone
removes one; a group-metadata record replaces the group's membership (generation, protocol, leader,
members with their subscription and assignment), a tombstone forgets the group. A group whose last
metadata has members comes back Stable, so consumers that were in it before the restart keep their
member ids and generation and carry on with a heartbeat; those that do not come back are expired by their
session timeout as usual (the coordinator arms the timers after loading).
"""

from __future__ import annotations

import logging

from strom.coordinator.group import Group, Member
from strom.coordinator.messages import OffsetAndMetadata, TopicPartition
from strom.coordinator.ports import PartitionWriter
from strom.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from strom.coordinator.state import GroupState

log = logging.getLogger(__name__)


class GroupStore:
    def __init__(self, writer: PartitionWriter, num_partitions: int) -> None:
        self.groups: dict[str, Group] = {}
        self.num_partitions = num_partitions
        self._writer = writer

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def get_or_create(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        return group

    def forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # --- writes --------------------------------------------------------------------------------
    def store_group(self, group: Group, assignment: dict[str, bytes] | None = None) -> None:
        """Persist the group's membership (with ``assignment`` if given, else each member's current one).

        Raises:
            KafkaError: the append failed.
        """
        value = group_metadata_value(group, assignment)
        self._writer.append(
            self.partition_of(group.group_id),
            [(encode_key(GroupMetadataKey(group.group_id)), encode_value(value))],
        )

    def store_offsets(self, group_id: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Persist then apply committed offsets. Raises KafkaError (memory untouched) on failure."""
        if not offsets:
            return
        records: list[tuple[bytes, bytes | None]] = [
            (
                encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)),
                encode_value(
                    OffsetCommitValue(om.offset, om.leader_epoch, om.metadata, om.commit_timestamp_ms)
                ),
            )
            for tp, om in offsets.items()
        ]
        self._writer.append(self.partition_of(group_id), records)
        self.get_or_create(group_id).offsets.update(offsets)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]) -> None:
        """Tombstone then drop committed offsets. Raises KafkaError on failure."""
        if not partitions:
            return
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition)), None) for tp in partitions
        ]
        self._writer.append(self.partition_of(group_id), records)
        group = self.groups.get(group_id)
        if group is not None:
            for tp in partitions:
                group.offsets.pop(tp, None)

    def delete_group(self, group: Group) -> None:
        """Tombstone the group's offsets and metadata, then forget it. Raises KafkaError on failure."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetCommitKey(group.group_id, tp.topic, tp.partition)), None)
            for tp in group.offsets
        ]
        records.append((encode_key(GroupMetadataKey(group.group_id)), None))
        self._writer.append(self.partition_of(group.group_id), records)
        self.groups.pop(group.group_id, None)

    # --- replay --------------------------------------------------------------------------------
    def replay(self, key_bytes: bytes | None, value_bytes: bytes | None, now_ms: int) -> None:
        """Apply one `__consumer_offsets` record during loading; unreadable records are logged and skipped."""
        if key_bytes is None:
            log.warning("skipping __consumer_offsets record without a key")
            return
        try:
            key = decode_key(key_bytes)
            value = None if value_bytes is None else decode_value(key, value_bytes)
        except RecordFormatError as exc:
            log.warning("skipping unreadable __consumer_offsets record: %s", exc)
            return
        if isinstance(key, OffsetCommitKey):
            self._replay_offset(key, value)
        else:
            self._replay_group(key.group, value, now_ms)

    def _replay_offset(self, key: OffsetCommitKey, value: object) -> None:
        tp = TopicPartition(key.topic, key.partition)
        if value is None:
            group = self.groups.get(key.group)
            if group is not None:
                group.offsets.pop(tp, None)
                if not group.offsets and not group.uses_group_management:
                    self.groups.pop(key.group, None)
            return
        assert isinstance(value, OffsetCommitValue)
        self.get_or_create(key.group).offsets[tp] = OffsetAndMetadata(
            value.offset, value.leader_epoch, value.metadata, value.commit_timestamp
        )

    def _replay_group(self, group_id: str, value: object, now_ms: int) -> None:
        if value is None:
            self.groups.pop(group_id, None)
            return
        assert isinstance(value, GroupMetadataValue)
        old = self.groups.get(group_id)
        group = Group(group_id, offsets=old.offsets if old is not None else {})
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol_name
        for m in value.members:
            member = Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=((value.protocol_name or "", m.subscription),),
                assignment=m.assignment,
                last_heartbeat_ms=now_ms,
            )
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        # Not a state move but a reconstruction: the group is (re)born in the state it was stored in.
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.current_state_timestamp_ms = value.current_state_timestamp
        self.groups[group_id] = group


def group_metadata_value(group: Group, assignment: dict[str, bytes] | None = None) -> GroupMetadataValue:
    protocol = group.protocol_name
    members = tuple(
        MemberRecord(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            subscription=m.metadata(protocol) if protocol else b"",
            assignment=m.assignment if assignment is None else assignment.get(m.member_id, b""),
        )
        for m in group.members.values()
    )
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol_name=protocol,
        leader=group.leader_id,
        current_state_timestamp=group.current_state_timestamp_ms,
        members=members,
    )
