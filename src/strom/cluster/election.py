"""Leader election decisions: pure functions over (replicas, ISR, live brokers), no I/O.

Kafka's controller elects a partition leader in four situations, each a function here:

* **offline** (the leader died, or a new partition comes online): the first replica, in assignment
  order, that is alive and in the ISR. If none is and unclean leader election is enabled for the topic,
  the first live replica at all (its log becomes the truth; committed records may be lost). Otherwise
  the partition stays offline (leader -1) until an ISR member returns.
* **preferred** (auto rebalance, ElectLeaders, `strom cluster elect-leaders`): the first replica, if it is
  alive and in the ISR; otherwise no change.
* **reassignment**: the first replica of the *target* list that is alive and in the ISR.
* **controlled shutdown**: the first live ISR replica that is not shutting down.

Every election that changes the leader bumps the leader epoch; the new ISR keeps only live replicas (and
always contains the new leader). A result of ``None`` means "no leader can be elected".

The controller applies a `Decision` -- a function of the partition's current `LeaderAndIsr` returning
``(leader, isr)`` or None -- with conditional writes, and calls it again on the fresh state after a
write conflict (`strom.cluster.partition_machine`). `offline_partition_decision` is the one the
controller uses after broker failures: it keeps a live leader and only drops dead brokers from the ISR,
elects a new leader otherwise, and writes leader -1 (keeping the last ISR, so that a returning member can
lead again) when nobody can lead; a member that restarted meanwhile is dropped from that ISR unless it is
all that is left (`kept_isr`), and recorded (`LeaderAndIsr.restarted`, `next_restarted`). Once every
member left has restarted too, none is known whole, so the furthest log among them and the recorded
ones leads, when all are back and have said where their logs end (`longest_log_leader`); preferred and
reassignment elections choose only among members not recorded (`trusted_isr`).

**Eligible leader replicas** (KIP-966's ELR). While a partition's ISR is below its min ISR no acks=all
record is acknowledged (the leader refuses them and its high watermark stays), so the members the
controller removed to get there hold every acknowledged record, as long as their process does not
restart: a restarted process may have lost the writes its disk had not synced. `next_elr` keeps them,
each with the broker epoch of the registration it had (`LeaderAndIsr.elr`), and clears them once the
ISR is back at min ISR. When no live ISR member can lead, `offline_partition_decision` elects the first
``electable`` of them (the controller checks that the same process is still registered) before any
unclean election: the case KIP-966 closes, where the last ISR member comes back from a machine crash
with a shorter log than a member removed before it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "NO_LEADER",
    "Decision",
    "ElectionType",
    "LeaderAndIsr",
    "controlled_shutdown_leader",
    "election_needed",
    "hit_by_broker_failure",
    "kept_isr",
    "longest_log_leader",
    "next_elr",
    "next_restarted",
    "offline_leader",
    "offline_partition_decision",
    "preferred_leader",
    "preferred_leader_imbalanced",
    "reassignment_leader",
    "shrink_isr",
    "trusted_isr",
    "waiting_for_log_ends",
]

NO_LEADER = -1


class ElectionType(IntEnum):
    """ElectLeaders' ``election_type`` (KIP-460)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership as stored in its state znode (plus the znode version it was read at)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = -1
    #: Eligible leader replicas as (broker, broker epoch of its registration then): see the module doc.
    elr: tuple[tuple[int, int], ...] = ()
    #: Without a leader: the ISR members seen restarted since it lost it, kept or not (`next_restarted`).
    restarted: tuple[int, ...] = ()

    def elected(
        self,
        leader: int,
        isr: Sequence[int],
        controller_epoch: int,
        elr: tuple[tuple[int, int], ...] = (),
        restarted: tuple[int, ...] = (),
    ) -> LeaderAndIsr:
        """The next state after an election: the epoch moves on even when the leader stays the same."""
        return LeaderAndIsr(
            leader,
            self.leader_epoch + 1,
            tuple(isr),
            controller_epoch,
            self.zk_version,
            tuple(elr),
            tuple(restarted),
        )


#: ``(leader, isr)`` to write, or None for "leave the partition as it is".
Decision = tuple[int, list[int]] | None


def _live_isr(isr: Collection[int], live: Collection[int]) -> list[int]:
    return [b for b in isr if b in live]


def trusted_isr(state: LeaderAndIsr) -> list[int]:
    """The ISR members that may lead by being in it: not those seen restarted while the partition had
    no leader (`longest_log_leader` picks among them). Preferred and reassignment elections use it."""
    return [b for b in state.isr if b not in state.restarted]


def offline_leader(
    replicas: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    unclean_allowed: bool = False,
) -> tuple[int, list[int]] | None:
    """(leader, new ISR) when the current leader is gone, or None if the partition must stay offline."""
    live_isr = _live_isr(isr, live)
    for replica in replicas:
        if replica in live_isr:
            return replica, [b for b in replicas if b in live_isr] + [
                b for b in live_isr if b not in replicas
            ]
    if unclean_allowed:
        for replica in replicas:
            if replica in live:
                return replica, [replica]
    return None


def preferred_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> tuple[int, list[int]] | None:
    """(preferred replica, ISR) if the first replica can lead, else None."""
    if not replicas:
        return None
    preferred = replicas[0]
    if preferred in live and preferred in isr:
        return preferred, _live_isr(isr, live)
    return None


def reassignment_leader(
    target_replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> tuple[int, list[int]] | None:
    """(leader, ISR) chosen among the target replicas once they have caught up."""
    live_isr = _live_isr(isr, live)
    for replica in target_replicas:
        if replica in live_isr:
            return replica, live_isr
    return None


def controlled_shutdown_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], shutting_down: Collection[int]
) -> tuple[int, list[int]] | None:
    """(leader, ISR without the stopping brokers), or None if no other ISR member is alive."""
    candidates = [b for b in _live_isr(isr, live) if b not in shutting_down]
    for replica in replicas:
        if replica in candidates:
            return replica, candidates
    return None


def shrink_isr(isr: Sequence[int], removed: Collection[int]) -> list[int]:
    """The ISR without ``removed``, order kept (the leader is never removed by this function's callers)."""
    return [b for b in isr if b not in removed]


def offline_partition_decision(
    current: LeaderAndIsr,
    replicas: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
    unclean_allowed: Callable[[], bool],
    bounced: Collection[int] = (),
    electable: Collection[int] = (),
    log_ends: Mapping[int, tuple[int, int]] | None = None,
) -> Decision:
    """After broker failures: drop dead ISR members, elect a new leader, or write leader -1.

    ``unclean_allowed`` is asked only when no ISR member can lead (it reads the topic's config).
    ``bounced`` are dead brokers that registered again (a restarted process): with leader -1 they
    leave the ISR that is kept, unless nobody else is in it (`kept_isr`). ``electable``: the eligible
    leader replicas (``current.elr``) that are live as the process they were; the first of them, in
    replica order, leads when no ISR member can. ``log_ends``: where live replicas' logs end, as they
    answered for this partition without a leader (`longest_log_leader`).
    """
    if current.leader in live and current.leader not in shutting_down:
        isr = [b for b in current.isr if b in live]
        return (current.leader, isr) if isr else None
    eligible = [b for b in live if b not in shutting_down]
    restarted = {*current.restarted, *bounced}
    result = offline_leader(replicas, [b for b in current.isr if b not in restarted], eligible)
    if result is None:
        for replica in replicas:
            if replica in electable and replica in eligible:
                return replica, [replica]
    if result is None:
        result = longest_log_leader(current, replicas, eligible, restarted, log_ends or {})
        if result is None and waiting_for_log_ends(current, replicas, eligible, restarted, log_ends or {}):
            return None  # every candidate is back: their answers decide, not an unclean election
    if result is None and unclean_allowed():
        result = offline_leader(replicas, current.isr, eligible, unclean_allowed=True)
    if result is None:
        kept = kept_isr(current.isr, bounced)
        newly = any(b in current.isr and b not in current.restarted for b in bounced)  # to record
        if current.leader != NO_LEADER or kept != list(current.isr) or newly:
            return NO_LEADER, kept
    return result


def longest_log_leader(
    current: LeaderAndIsr,
    replicas: Sequence[int],
    eligible: Collection[int],
    restarted: Collection[int],
    log_ends: Mapping[int, tuple[int, int]],
) -> tuple[int, list[int]] | None:
    """When every ISR member restarted, the one whose log got furthest, once all are back.

    Each may have lost the writes its disk had not synced (a machine crash), so none is known whole;
    the candidates are the ISR and the members dropped from it for restarting (``current.restarted``),
    which may hold more than the member kept (a process restart keeps the page cache). Once every
    candidate is live and has said where its log ends (its answer to a LeaderAndIsr without a leader:
    the latest leader epoch in it, then the log end offset, Kafka's order for logs), the furthest
    leads, the first in replica order among equals; one candidate alone leads as Kafka's last ISR
    member does. None while a candidate is awaited, or a member that did not restart is.
    """
    candidates = _recovery_candidates(current, replicas, eligible, restarted)
    if not candidates or (len(candidates) > 1 and any(b not in log_ends for b in candidates)):
        return None
    best = max(candidates, key=lambda b: (log_ends.get(b, (-1, -1)), -candidates.index(b)))
    return best, [best]


def waiting_for_log_ends(
    current: LeaderAndIsr,
    replicas: Sequence[int],
    eligible: Collection[int],
    restarted: Collection[int],
    log_ends: Mapping[int, tuple[int, int]],
) -> list[int]:
    """The candidates of `longest_log_leader` whose answers it still needs, when that is all it needs
    (every ISR member restarted, every candidate live); empty otherwise."""
    candidates = _recovery_candidates(current, replicas, eligible, restarted)
    return [b for b in candidates if b not in log_ends] if len(candidates) > 1 else []


def _recovery_candidates(
    current: LeaderAndIsr, replicas: Sequence[int], eligible: Collection[int], restarted: Collection[int]
) -> list[int]:
    """The replicas `longest_log_leader` chooses among (the ISR and the members dropped from it for
    restarting), when every ISR member restarted and every candidate is eligible; else none."""
    if not current.isr or any(b not in restarted for b in current.isr):
        return []
    candidates = [b for b in replicas if b in current.isr or b in current.restarted]
    return candidates if all(b in eligible for b in candidates) else []


def next_restarted(
    current: LeaderAndIsr, leader: int, bounced: Collection[int], replicas: Sequence[int]
) -> tuple[int, ...]:
    """The ``restarted`` a write of ``leader`` keeps: none once there is a leader; else those known and
    the ISR members that restarted now (``bounced``), in replica order (a reassignment's leftovers go)."""
    if leader != NO_LEADER:
        return ()
    return tuple(b for b in replicas if b in current.restarted or (b in bounced and b in current.isr))


def kept_isr(isr: Sequence[int], bounced: Collection[int]) -> list[int]:
    """The ISR a partition keeps when nobody can lead it: the members that did not restart, or
    the whole ISR if every member did (Kafka's rule: the last member stays, to lead on its return).

    A restarted broker may have lost records it had acknowledged to the leader as replicated (a
    machine crash takes its unsynced writes), so it must not be the member the partition waits
    for while another member, a paused or cut-off process whose log is whole, is still in it:
    were it kept, it alone would be live on its return and lead with the shorter log, and the
    other member would truncate acknowledged records to follow it. Kafka's controller gets the
    same order by deciding a bounced broker's failure before the other dead brokers'.
    """
    return [b for b in isr if b not in bounced] or list(isr)


def next_elr(
    current: LeaderAndIsr,
    isr: Sequence[int],
    min_isr: int,
    epoch_of: Callable[[int], int | None],
    ineligible: Collection[int] = (),
) -> tuple[tuple[int, int], ...]:
    """The eligible leader replicas after the controller writes ``isr`` over ``current``: none once the
    ISR is at ``min_isr`` (records are acknowledged without the others again); else the ones kept and
    the members this write removes, each with ``epoch_of`` its registration (None: not known, not
    kept), but for ``ineligible`` brokers (a restarted process, a replica in a failed log dir)."""
    if len(isr) >= min_isr:
        return ()
    kept = [(b, e) for b, e in current.elr if b not in isr and b not in ineligible]
    for broker in current.isr:
        epoch = epoch_of(broker)
        if broker in isr or broker in ineligible or epoch is None or any(b == broker for b, _ in kept):
            continue
        kept.append((broker, epoch))
    return tuple(kept)


def hit_by_broker_failure(state: LeaderAndIsr, dead: Collection[int]) -> bool:
    """Whether the partition needs `offline_partition_decision` after ``dead`` brokers went away
    (a partition already without a leader is retried at every broker change)."""
    return state.leader in dead or state.leader == NO_LEADER or any(b in dead for b in state.isr)


def election_needed(
    election_type: ElectionType, state: LeaderAndIsr, replicas: Sequence[int], live: Collection[int]
) -> bool:
    """ElectLeaders answers ELECTION_NOT_NEEDED unless this is true: an unclean election only for a
    partition without a live leader, a preferred one only when the preferred replica does not lead."""
    if election_type == ElectionType.UNCLEAN:
        return state.leader not in live
    return state.leader != replicas[0]


def preferred_leader_imbalanced(
    state: LeaderAndIsr, replicas: Sequence[int], live: Collection[int], reassigning: bool
) -> bool:
    """Auto rebalance moves leadership back when the preferred replica is alive, in the ISR and not
    leading, and no reassignment of the partition is adding replicas."""
    if not replicas or reassigning:
        return False
    preferred = replicas[0]
    return state.leader != preferred and preferred in trusted_isr(state) and preferred in live
