"""Share groups (KIP-932) in the console: the group list's rows and a group's page, as type ``share``.

A share group lives in two places: its membership on its coordinator (`share_group_service`, like any
group's), and its share-partitions (the share-partition start offset, the records in flight) on each
partition's leader (`SharePartitionManager`). The console draws what the answering broker holds: the
groups it coordinates with their members and assignments (a partition may be assigned to several
members), and, for the partitions it leads, the share-partition start offset in the "Committed" column
and the records not yet acknowledged or archived as the lag (Kafka's share-group backlog). A partition
led elsewhere shows '-'. Share groups have no committed offsets, so there is no reset action.
"""

from __future__ import annotations

from strom.broker.broker import Broker
from strom.broker.coordinators.share_group_service import share_group, share_groups
from strom.web.console.views import GroupOffset, GroupRow, GroupView, MemberView


def _backlogs(broker: Broker, group_id: str, topics: dict[str, list[int]]) -> list[GroupOffset]:
    owners: dict[tuple[str, int], list[str]] = {}
    group = share_group(broker.groups, group_id)
    for member in group.members.values() if group is not None else ():
        for topic, partitions in member.assignment.items():
            for index in partitions:
                owners.setdefault((topic, index), []).append(member.member_id)
    offsets = []
    for topic, indexes in sorted(topics.items()):
        for index in indexes:
            share = broker.shares.known(group_id, topic, index)
            part = broker.replica_manager.partitions.get((topic, index))
            led = share is not None and part is not None and part.is_leader
            end = part.log.high_watermark if led and part is not None else None
            start = share.start_offset if led and share is not None else -1
            lag = broker.shares.backlog(group_id, topic, index) if led else None
            owner = ", ".join(sorted(owners.get((topic, index), []))) or None
            offsets.append(GroupOffset(topic, index, start, end, lag, owner))
    return offsets


def _partitions(broker: Broker, group_id: str) -> dict[str, list[int]]:
    """The partitions the group reads: its members' assignments and the share-partitions held here."""
    found: dict[str, set[int]] = {}
    group = share_group(broker.groups, group_id)
    for member in group.members.values() if group is not None else ():
        for topic, partitions in member.assignment.items():
            found.setdefault(topic, set()).update(partitions)
    for g, topic, index in broker.shares.all_partitions():
        if g == group_id:
            found.setdefault(topic, set()).add(index)
    return {t: sorted(ps) for t, ps in found.items()}


def share_group_rows(broker: Broker) -> list[GroupRow]:
    """The share groups this broker coordinates, with their backlog over the partitions it leads."""
    rows = []
    for group in share_groups(broker.groups):
        lags = [o.lag for o in _backlogs(broker, group.group_id, _partitions(broker, group.group_id))]
        known = [lag for lag in lags if lag is not None]
        rows.append(
            GroupRow(group.group_id, "share", group.state, len(group.members), sum(known) if known else None)
        )
    return rows


def share_group_view(broker: Broker, group_id: str) -> GroupView | None:
    """A share group this broker coordinates, as its coordinator reports it."""
    group = share_group(broker.groups, group_id)
    if group is None:
        return None
    members = [
        MemberView(m.member_id, m.client_id, m.client_host, {t: sorted(ps) for t, ps in m.assignment.items()})
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    offsets = _backlogs(broker, group_id, _partitions(broker, group_id))
    return GroupView(group_id, "share", group.state, "share", "simple", group.group_epoch, members, offsets)
