"""Incremental reconciliation of one member towards the target assignment (pure).

KIP-848's rule: a member never gets a partition that another member still owns, and it keeps its
member epoch until it has revoked what it must give up. Given the member as it is, the target
assignment (with its epoch), the partitions the member says it owns (the heartbeat's
``TopicPartitions``; None when it did not say), and who owns each partition now, `reconcile` returns
the member's next state (Kafka's ``CurrentAssignmentBuilder``):

* STABLE at an older epoch, UNRELEASED_PARTITIONS, or UNREVOKED_PARTITIONS whose revoked partitions the
  member no longer reports: compute the next assignment.
  - partitions it owns that are not in its target (or whose topic it no longer subscribes to) go
    *pending revocation*: unless its heartbeat already reports them gone, the member moves to
    UNREVOKED_PARTITIONS, keeps only the kept partitions, and keeps its epoch;
  - otherwise it gets every target partition that is free (no other owner): STABLE at the target epoch,
    or UNRELEASED_PARTITIONS at the target epoch while some are still owned by another member.
* UNREVOKED_PARTITIONS still reporting (or not reporting) the revoked partitions: unchanged.
* STABLE at the target epoch: unchanged, except that partitions of topics it no longer subscribes to are
  taken away at once (pending revocation if it still owns them).

A member that finished revoking gets its new partitions only on a later heartbeat, once each is free:
the previous owner's heartbeat that reports the revocation frees them (`model.ConsumerGroup.owners`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from strom.coordinator.consumer.model import ConsumerMember, MemberState, partitions_of
from strom.coordinator.consumer.records import Assignment

# (topic, partition) -> the member id owning it now, or None.
OwnerOf = Callable[[str, int], str | None]


def _add(out: dict[str, set[int]], topic: str, partition: int) -> None:
    out.setdefault(topic, set()).add(partition)


def _freeze(parts: dict[str, set[int]]) -> dict[str, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in parts.items() if ps}


def owns_any(owned: Collection[tuple[str, int]] | None, revoking: Assignment) -> bool:
    """Whether the member still reports one of ``revoking`` (not reporting counts as still owning)."""
    if owned is None:
        return True
    return any(tp in owned for tp in partitions_of(revoking))


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Collection[tuple[str, int]] | None,
    owner_of: OwnerOf,
    subscribed: Collection[str] | None = None,
) -> ConsumerMember:
    """The member's next state (see the module docstring); ``subscribed`` (the topics it subscribes to
    now) strips topics it left from a STABLE member's assignment without waiting for a new epoch."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, target_epoch, target, owned, owner_of, subscribed)
        if subscribed is not None:
            return _drop_unsubscribed(member, owned, subscribed)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.revoking):
            return member
        return _next_assignment(member, target_epoch, target, owned, owner_of, subscribed)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, target_epoch, target, owned, owner_of, subscribed)
    # UNKNOWN: start over from nothing (the caller fences a member still owning partitions).
    fresh = replace(member, assigned={}, revoking={})
    return _next_assignment(fresh, target_epoch, target, owned, owner_of, subscribed)


def _next_assignment(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Collection[tuple[str, int]] | None,
    owner_of: OwnerOf,
    subscribed: Collection[str] | None,
) -> ConsumerMember:
    kept: dict[str, set[int]] = {}
    revoking: dict[str, set[int]] = {}
    current = set(partitions_of(member.assigned))
    # A topic the member no longer subscribes to has an empty target for it.
    wanted = {tp for tp in partitions_of(target) if subscribed is None or tp[0] in subscribed}
    for tp in current:
        _add(kept if tp in wanted else revoking, *tp)
    if revoking and owns_any(owned, _freeze(revoking)):
        # Revoke first; the epoch stays until the member reports the revocation.
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=_freeze(kept),
            revoking=_freeze(revoking),
        )
    # Nothing to revoke (or the member reported it already gave those up): take what is free.
    pending = sorted(wanted - current)
    unreleased = False
    for tp in pending:
        owner = owner_of(*tp)
        # Its own partitions pending revocation are no one else's: not unreleased.
        if owner is None or owner == member.member_id:
            _add(kept, *tp)
        else:
            unreleased = True
    return replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=member.member_epoch,
        member_epoch=target_epoch,
        assigned=_freeze(kept),
        revoking={},
    )


def _drop_unsubscribed(
    member: ConsumerMember, owned: Collection[tuple[str, int]] | None, subscribed: Collection[str]
) -> ConsumerMember:
    gone = {t: ps for t, ps in member.assigned.items() if t not in subscribed and ps}
    if not gone:
        return member
    assigned = {t: ps for t, ps in member.assigned.items() if t not in gone}
    if owns_any(owned, gone):
        revoking = {**member.revoking, **gone}
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned, revoking=revoking)
    return replace(member, assigned=assigned)
