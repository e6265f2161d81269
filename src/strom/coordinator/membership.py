"""Group membership: Kafka's classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup protocol, sans I/O.

Theory of operation. A consumer finds the coordinator (FindCoordinator), then loops:

1. **JoinGroup** -- "I am here and support these protocols". The first join of an Empty group, a new
   member, a leaving or expired member, or a member whose subscription changed puts the group in
   PreparingRebalance. Join requests are *parked* (their callback kept) until every member has rejoined
   or the rebalance timeout passes (members that did not rejoin -- e.g. stuck longer than
   `max.poll.interval.ms` -- are dropped, except static members, who keep their place until their
   session times out). Then the generation is bumped, the protocol chosen, and every parked join is
   answered; the leader's answer carries every member's opaque subscription.
   The first rebalance of an Empty group waits `group.initial.rebalance.delay.ms` first, and again
   while new members keep arriving (up to the rebalance timeout), so a fleet of consumers starting
   together lands in one generation (Kafka's InitialDelayedJoin).
   KIP-394: a v4+ client joining without a member id gets MEMBER_ID_REQUIRED with an id to rejoin with,
   so a client that retries never leaves orphan members behind.
2. **SyncGroup** -- the leader sends the assignment it computed; it is persisted and handed out to every
   member parked in SyncGroup, and the group is Stable. Followers' SyncGroup waits for the leader's.
3. **Heartbeat** every `heartbeat.interval.ms`: NONE while Stable, REBALANCE_IN_PROGRESS to ask for a
   rejoin. A member that sends nothing for `session.timeout.ms` is removed and the group rebalances.
4. **LeaveGroup** on close: removed at once, the group rebalances without waiting for the session timeout.

Static membership (KIP-345): a member with a `group.instance.id` that restarts joins with an empty member
id; it takes over its old member's place (new member id, old assignment). If the group is Stable and the
chosen protocol would not change, no rebalance happens: the join is answered at once with the current
generation and the *old* leader id (so the member does not think it leads), and its SyncGroup gets its
old assignment back. A request carrying the instance id with an older member id is FENCED_INSTANCE_ID.

The join phase, join timers and member sessions are the `Rebalancer` of `strom.coordinator.rebalance`
(its docstring tells how a rebalance completes and how sessions expire); this module answers the
requests and calls into it. Timers go through an injected :class:`Scheduler`, time through an injected
clock, and every decision is synchronous: a handler calls in, and parked requests are answered through
their callbacks, possibly later from a timer. Persistence goes through :class:`GroupStore` (a record
per change, appended before the change is acknowledged). Call only from one thread (the broker's event
loop).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from strom._util.clock import Clock
from strom.coordinator.group import Group, Member
from strom.coordinator.messages import (
    UNKNOWN_MEMBER_ID,
    JoinCallback,
    JoinGroupRequest,
    JoinResult,
    SyncCallback,
    SyncGroupRequest,
    SyncResult,
)
from strom.coordinator.ports import Scheduler
from strom.coordinator.rebalance import GroupConfig, Rebalancer
from strom.coordinator.state import GroupState
from strom.coordinator.store import GroupStore
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["GroupConfig", "GroupMembership"]


class GroupMembership:
    """Join, sync, heartbeat and leave for every group this broker coordinates."""

    def __init__(self, config: GroupConfig, clock: Clock, scheduler: Scheduler, store: GroupStore) -> None:
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.store = store
        self.rebalance = Rebalancer(config, clock, scheduler, store)

    def keep_alive(self, group: Group, member: Member) -> None:
        """Record a sign of life and make sure a session-expiry timer is armed for the member."""
        self.rebalance.keep_alive(group, member)

    def arm_loaded_members(self, groups: Iterable[Group] | None = None) -> None:
        """After loading: members restored from the log get a fresh session to show up in."""
        self.rebalance.arm_loaded_members(groups)

    # --- JoinGroup -----------------------------------------------------------------------------
    def join_group(self, req: JoinGroupRequest, respond: JoinCallback) -> None:
        error = self._validate_join(req)
        if error is not ErrorCode.NONE:
            respond(JoinResult(error, req.member_id))
            return
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.store.get(req.group_id)
        if group is None:
            if not is_unknown:
                respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
                return
            group = self.store.get_or_create(req.group_id)
        names = [name for name, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            respond(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
        elif is_unknown and req.group_instance_id is not None:
            self._join_new_static(group, req, respond)
        elif is_unknown:
            self._join_new_dynamic(group, req, respond)
        else:
            self._join_known(group, req, respond)

    def _validate_join(self, req: JoinGroupRequest) -> ErrorCode:
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not (
            self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return ErrorCode.NONE

    def _new_member_id(self, req: JoinGroupRequest) -> str:
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        return f"{prefix}-{uuid.uuid4()}"

    def _join_new_dynamic(self, group: Group, req: JoinGroupRequest, respond: JoinCallback) -> None:
        member_id = self._new_member_id(req)
        if req.require_known_member_id:
            # KIP-394: hand out the id and expect the client to rejoin with it within its session.
            group.pending_members.add(member_id)
            self.scheduler.call_later(
                req.session_timeout_ms, lambda: self.rebalance.expire_pending_member(group, member_id)
            )
            respond(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id))
            return
        self._add_member_and_rebalance(group, req, member_id, respond)

    def _join_new_static(self, group: Group, req: JoinGroupRequest, respond: JoinCallback) -> None:
        assert req.group_instance_id is not None
        old_id = group.static_member_id(req.group_instance_id)
        new_id = self._new_member_id(req)
        if old_id is None:
            self._add_member_and_rebalance(group, req, new_id, respond)
            return
        self._replace_static_member(group, req, old_id, new_id, respond)

    def _join_known(self, group: Group, req: JoinGroupRequest, respond: JoinCallback) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, req, member_id, respond)
            return
        if group.is_static_member_fenced(member_id, req.group_instance_id):
            respond(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id))
            return
        unknown_instance = (
            req.group_instance_id is not None and group.static_member_id(req.group_instance_id) is None
        )
        member = group.members.get(member_id)
        if member is None or unknown_instance or group.state in (GroupState.EMPTY, GroupState.DEAD):
            respond(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member lost its join response; answer again for the current generation.
                respond(self.rebalance.join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_leader(member_id) or not member.matches(req.protocols):
            # Stable. A leader's join forces a rebalance: it may have seen a change (new partitions,
            # a regex subscription matching a new topic) that no member's metadata shows.
            self._update_member_and_rebalance(group, member, req, respond)
        else:
            self.rebalance.keep_alive(group, member)
            respond(self.rebalance.join_result(group, member, with_members=False))

    def _add_member_and_rebalance(
        self, group: Group, req: JoinGroupRequest, member_id: str, respond: JoinCallback
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            join_callback=respond,
            is_new=True,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            # Extends the initial rebalance delay by one more round (see _on_join_timer).
            group.new_member_added = True
        group.pending_members.discard(member_id)
        group.add(member)
        self.rebalance.keep_alive(group, member)
        self.rebalance.maybe_prepare_rebalance(group, f"new member {member_id} joined")

    def _update_member_and_rebalance(
        self, group: Group, member: Member, req: JoinGroupRequest, respond: JoinCallback
    ) -> None:
        if member.join_callback is not None and member.join_callback is not respond:
            # A retried join supersedes the parked one; answer the old one so nothing dangles.
            member.join_callback(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.join_callback = respond
        self.rebalance.maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _replace_static_member(
        self, group: Group, req: JoinGroupRequest, old_id: str, new_id: str, respond: JoinCallback
    ) -> None:
        assert req.group_instance_id is not None
        old = group.members[old_id]
        # The old incarnation's parked requests can never be answered usefully any more.
        if old.join_callback is not None:
            old.join_callback(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
            old.join_callback = None
        if old.sync_callback is not None:
            old.sync_callback(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
            old.sync_callback = None
        previous_leader = group.leader_id
        old_protocols = old.protocols
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        self.rebalance.keep_alive(group, member)
        if group.is_(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                member.join_callback = respond
                self.rebalance.prepare_rebalance(group, f"static member {new_id} changed protocols")
                return
            try:
                self.store.store_group(group)
            except KafkaError as exc:
                # Undo: the old member id stays valid, the newcomer is told to retry.
                group.replace_static_member(req.group_instance_id, new_id, old_id)
                member.protocols = old_protocols
                respond(JoinResult(exc.code, UNKNOWN_MEMBER_ID))
                return
            log.info(
                "group %s: static member %s rejoined as %s without a rebalance",
                group.group_id,
                req.group_instance_id,
                new_id,
            )
            # The old leader id is returned on purpose: the member must not believe it leads and
            # compute an assignment that a Stable group would never distribute.
            respond(
                JoinResult(
                    error=ErrorCode.NONE,
                    member_id=new_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=previous_leader or "",
                )
            )
            return
        member.join_callback = respond
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self.rebalance.prepare_rebalance(group, f"static member {new_id} replaced {old_id} during sync")
        # PreparingRebalance: the member is parked with the others until the join phase completes.
        else:
            self.rebalance.try_complete_join(group)

    # --- SyncGroup -----------------------------------------------------------------------------
    def sync_group(self, req: SyncGroupRequest, respond: SyncCallback) -> None:
        group = self.store.get(req.group_id)
        error = self._sync_error(group, req)
        if error is not ErrorCode.NONE or group is None:
            respond(SyncResult(error))
            return
        member = group.members[req.member_id]
        if group.is_(GroupState.STABLE):
            self.rebalance.keep_alive(group, member)
            respond(SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name))
            return
        # CompletingRebalance: park until the leader's assignment is stored.
        if member.sync_callback is not None and member.sync_callback is not respond:
            member.sync_callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_callback = respond
        if group.is_leader(req.member_id):
            self._complete_sync(group, dict(req.assignments))

    def _sync_error(self, group: Group | None, req: SyncGroupRequest) -> ErrorCode:
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if not group.has(req.member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        # Members the leader left out get an empty assignment, as in Kafka.
        assignment = {mid: assignments.get(mid, b"") for mid in group.members}
        try:
            self.store.store_group(group, assignment)
        except KafkaError as exc:
            self.rebalance.reset_and_propagate_assignment_error(group, exc.code)
            self.rebalance.prepare_rebalance(group, "could not store the assignment")
            return
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        group.transition_to(GroupState.STABLE, self.clock.time_ms())
        for member in group.members.values():
            callback, member.sync_callback = member.sync_callback, None
            if callback is not None:
                self.rebalance.keep_alive(group, member)
                callback(
                    SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name)
                )

    # --- Heartbeat -----------------------------------------------------------------------------
    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        group = self.store.get(group_id)
        if group is None or group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        self.rebalance.keep_alive(group, member)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        # Stable, or CompletingRebalance (members may heartbeat between their join and sync).
        return ErrorCode.NONE

    # --- LeaveGroup ----------------------------------------------------------------------------
    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """Per leaving ``(member_id, group_instance_id)``, the error (NONE when removed)."""
        group = self.store.get(group_id)
        if group is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        return [self._leave_one(group, member_id, instance_id) for member_id, instance_id in members]

    def _leave_one(self, group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            # Administrative removal of a static member by instance id alone.
            current = group.static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = current
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.rebalance.try_complete_join(group)
            return ErrorCode.NONE
        elif group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s left", group.group_id, member_id)
        self.rebalance.remove_member_and_update_group(group, member, "LeaveGroup")
        return ErrorCode.NONE

    # --- life cycle ----------------------------------------------------------------------------
    def on_group_deleted(self, group_id: str) -> None:
        self.rebalance.cancel_join_timer(group_id)

    def unload_group(self, group_id: str) -> None:
        """This broker stops coordinating the group: cancel its join timer, answer parked requests with
        NOT_COORDINATOR (clients look for the new coordinator). Session timers die on their own: they
        check that the store still holds the same group object. The caller forgets the group."""
        group = self.store.get(group_id)
        if group is None:
            self.rebalance.cancel_join_timer(group_id)
            return
        self.release_members(group, ErrorCode.NOT_COORDINATOR)

    def release_members(self, group: Group, code: ErrorCode) -> None:
        """Cancel the group's join timer and answer its parked JoinGroup and SyncGroup requests with
        ``code``: the group is about to be replaced (unloaded, or converted to a consumer group)."""
        self.rebalance.cancel_join_timer(group.group_id)
        for member in group.members.values():
            join, member.join_callback = member.join_callback, None
            sync, member.sync_callback = member.sync_callback, None
            if join is not None:
                join(JoinResult(code, member.member_id))
            if sync is not None:
                sync(SyncResult(code))

    def shutdown(self) -> None:
        """Answer every parked request with NOT_COORDINATOR so clients look for the new coordinator."""
        self.rebalance.cancel_all_join_timers()
        for group_id in list(self.store.groups):
            self.unload_group(group_id)
