"""Classic consumer-group states and the moves allowed between them.

Theory of operation (Kafka's `ClassicGroupState`, one enum member per state):

* ``EMPTY`` -- no members. The group may still own committed offsets (a standalone ``assign()`` user,
  or a group whose consumers all left). A JoinGroup moves it to PreparingRebalance; deleting it (or
  expiring its last offsets) moves it to Dead.
* ``PREPARING_REBALANCE`` -- a rebalance has begun: JoinGroup requests are parked until every known
  member has rejoined or the rebalance timeout (the largest ``rebalance_timeout_ms`` of the members,
  i.e. the consumers' ``max.poll.interval.ms``) passes; members that did not rejoin are dropped.
  Heartbeats answer REBALANCE_IN_PROGRESS so that members know to rejoin.
* ``COMPLETING_REBALANCE`` -- the join phase is over, the generation is bumped and JoinGroup responses
  are out; the coordinator waits for the leader's SyncGroup carrying the assignment. Followers' SyncGroup
  requests are parked until it arrives.
* ``STABLE`` -- the leader's assignment has been persisted and handed out. Heartbeats answer NONE;
  a join by a new member, a leave, a session expiry or a changed subscription starts a rebalance.
* ``DEAD`` -- the group has been deleted (DeleteGroups, or offsets expired while Empty). The
  coordinator forgets it; a later request about the same id creates a new Empty group.

`VALID_PREVIOUS` is the table of allowed moves; :func:`check_transition` enforces it so that a coding
mistake shows up as an exception at the faulty move, not as a wedged group later.
"""

from __future__ import annotations

from enum import Enum


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def kafka_name(self) -> str:
        """The name DescribeGroups and ListGroups report (Kafka's `toString`)."""
        return self.value


VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    # Empty is reached when a rebalance ends with nobody left (all members left or timed out).
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


class IllegalStateTransition(RuntimeError):
    """A move the state table forbids: always a coordinator bug, never a client mistake."""


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    """Raise :class:`IllegalStateTransition` unless ``current`` may move to ``target``."""
    if current not in VALID_PREVIOUS[target]:
        raise IllegalStateTransition(
            f"group {group_id!r} cannot move from {current.kafka_name} to {target.kafka_name}"
        )
