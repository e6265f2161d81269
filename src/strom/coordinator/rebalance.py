"""The rebalance engine of classic group membership: join phase, join timers and member sessions.

Theory of operation (Kafka's ``GroupMetadataManager`` rebalance half, ``DelayedJoin``/``InitialDelayedJoin``
and ``DelayedHeartbeat``). `strom.coordinator.membership` answers the requests; this module moves a
group through a rebalance and expires members, and is what timers call back into:

* **Preparing a rebalance** (`Rebalancer.prepare_rebalance`): parked SyncGroups of a CompletingRebalance
  group are answered REBALANCE_IN_PROGRESS, the group goes to PreparingRebalance and a *join timer* is
  armed: the rebalance timeout (the largest ``rebalance_timeout_ms`` of the members), or for an Empty
  group `group.initial.rebalance.delay.ms`, extended by another delay while new members keep arriving,
  up to the rebalance timeout (InitialDelayedJoin: it completes only when it fires, never early).
* **Completing the join phase** (`Rebalancer.try_complete_join` early, once every member has rejoined;
  the join timer otherwise): dynamic members that did not rejoin are removed (static ones keep their
  place until their session expires; if only such members are left, another round is waited for), the
  generation is bumped and the protocol chosen, and every parked JoinGroup is answered -- the leader's
  answer with every member's subscription (`Rebalancer.join_result`). A group left without members is
  Empty and its metadata is stored.
* **Sessions** (`Rebalancer.keep_alive`): every sign of life of a member (join, sync, heartbeat) records
  the time; one session timer per member sleeps until the session would expire, and removes the member
  (answering its parked join with UNKNOWN_MEMBER_ID) and rebalances the group if nothing came in time.
  A member parked in JoinGroup or SyncGroup is kept alive while it waits; a *new* member parked in its
  first join gets Kafka's NEW_MEMBER_JOIN_TIMEOUT_MS instead of its session timeout.

Timers go through the injected `Scheduler` and check, when they fire, that the group and member are
still the ones they were armed for (a superseded timer does nothing). Call only from one thread (the
broker's event loop).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from strom._util.clock import Clock
from strom.coordinator.group import NEW_MEMBER_JOIN_TIMEOUT_MS, Group, Member
from strom.coordinator.messages import UNKNOWN_MEMBER_ID, JoinResult, SyncResult
from strom.coordinator.ports import Cancellable, Scheduler
from strom.coordinator.state import GroupState
from strom.coordinator.store import GroupStore
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("strom.coordinator.membership")

__all__ = ["GroupConfig", "Rebalancer"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096


@dataclass(slots=True)
class _JoinTimer:
    handle: Cancellable
    initial: bool  # InitialDelayedJoin: completes only when it fires, never early
    remaining_ms: int = 0


class Rebalancer:
    """Rebalances and sessions of every group this broker coordinates."""

    def __init__(self, config: GroupConfig, clock: Clock, scheduler: Scheduler, store: GroupStore) -> None:
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.store = store
        self._join_timers: dict[str, _JoinTimer] = {}

    def now(self) -> int:
        # Sessions are measured on the monotonic clock; state timestamps (persisted) on wall time.
        return self.clock.monotonic_ms()

    def join_result(self, group: Group, member: Member, with_members: bool = True) -> JoinResult:
        leader = group.is_leader(member.member_id) and with_members
        return JoinResult(
            error=ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=group.join_members() if leader else (),
        )

    # --- rebalance -----------------------------------------------------------------------------
    def maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self.prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.try_complete_join(group)

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self.reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.cancel_join_timer(group.group_id)
        was_empty = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.clock.time_ms())
        log.info(
            "group %s: preparing to rebalance at generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        if was_empty:
            delay = min(self.config.initial_rebalance_delay_ms, group.rebalance_timeout_ms())
            remaining = max(group.rebalance_timeout_ms() - self.config.initial_rebalance_delay_ms, 0)
            self._arm_join_timer(group, delay, initial=True, remaining_ms=remaining)
        else:
            self._arm_join_timer(group, group.rebalance_timeout_ms(), initial=False)
            self.try_complete_join(group)

    def _arm_join_timer(self, group: Group, delay_ms: int, initial: bool, remaining_ms: int = 0) -> None:
        holder: list[_JoinTimer] = []
        handle = self.scheduler.call_later(delay_ms, lambda: self._on_join_timer(group, holder[0]))
        timer = _JoinTimer(handle, initial, remaining_ms)
        holder.append(timer)
        self._join_timers[group.group_id] = timer

    def cancel_join_timer(self, group_id: str) -> None:
        timer = self._join_timers.pop(group_id, None)
        if timer is not None:
            timer.handle.cancel()

    def _on_join_timer(self, group: Group, timer: _JoinTimer) -> None:
        if self._join_timers.get(group.group_id) is not timer or self.store.get(group.group_id) is not group:
            return  # superseded
        del self._join_timers[group.group_id]
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if timer.initial and group.new_member_added and timer.remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, timer.remaining_ms)
            self._arm_join_timer(group, delay, initial=True, remaining_ms=max(timer.remaining_ms - delay, 0))
            return
        self._complete_join(group)

    def try_complete_join(self, group: Group) -> None:
        """Complete the join phase early once everyone is in (never during the initial delay)."""
        timer = self._join_timers.get(group.group_id)
        if timer is None or timer.initial or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.all_members_joined():
            self.cancel_join_timer(group.group_id)
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                log.info(
                    "group %s: member %s did not rejoin in time; removing it",
                    group.group_id,
                    member.member_id,
                )
                group.remove(member.member_id)
        group.maybe_elect_joined_leader()
        if group.members and not any(m.awaiting_join for m in group.members.values()):
            # Only static members left and none rejoined: wait another round for them to come back
            # or for their sessions to expire.
            self._arm_join_timer(group, group.rebalance_timeout_ms(), initial=False)
            return
        group.new_member_added = False
        group.init_next_generation(self.clock.time_ms())
        log.info(
            "group %s: generation %d with %d member(s), protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        if group.is_(GroupState.EMPTY):
            self.store_quietly(group)
            return
        for member in list(group.members.values()):
            callback, member.join_callback = member.join_callback, None
            member.is_new = False
            self.keep_alive(group, member)
            if callback is not None:
                callback(self.join_result(group, member))

    def store_quietly(self, group: Group) -> None:
        try:
            self.store.store_group(group)
        except KafkaError as exc:
            log.warning("group %s: could not persist group metadata: %s", group.group_id, exc)

    def reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                callback(SyncResult(error))

    def keep_alive(self, group: Group, member: Member) -> None:
        """Record a sign of life and make sure a session-expiry timer is armed for the member."""
        member.last_heartbeat_ms = self.now()
        if not member.timer_armed:
            member.timer_armed = True
            self._arm_session_timer(group, member, member.session_timeout_ms)

    def arm_loaded_members(self, groups: Iterable[Group] | None = None) -> None:
        """After loading: members restored from the log get a fresh session to show up in."""
        for group in self.store.groups.values() if groups is None else groups:
            for member in group.members.values():
                self.keep_alive(group, member)

    def _arm_session_timer(self, group: Group, member: Member, delay_ms: int) -> None:
        self.scheduler.call_later(delay_ms, lambda: self._on_session_timer(group, member))

    def _on_session_timer(self, group: Group, member: Member) -> None:
        if self.store.get(group.group_id) is not group or group.members.get(member.member_id) is not member:
            member.timer_armed = False
            return
        now = self.now()
        if member.should_keep_alive(now):
            # Sleep until the session would expire if nothing else happens.
            if member.awaiting_join or member.awaiting_sync:
                wait = member.session_timeout_ms
                if member.awaiting_join and member.is_new:
                    wait = member.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS - now
            else:
                wait = member.last_heartbeat_ms + member.session_timeout_ms - now
            self._arm_session_timer(group, member, max(wait, 1))
            return
        member.timer_armed = False
        log.info("group %s: member %s session expired; removing it", group.group_id, member.member_id)
        self.remove_member_and_update_group(group, member, "session timeout")

    def remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        if member.join_callback is not None:
            # Lets an expired-but-alive client retry its join from scratch.
            callback, member.join_callback = member.join_callback, None
            callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, f"member {member.member_id} left ({reason})")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.try_complete_join(group)

    def expire_pending_member(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.try_complete_join(group)

    def cancel_all_join_timers(self) -> None:
        for group_id in list(self._join_timers):
            self.cancel_join_timer(group_id)
