"""Which replica a consumer should read a partition from (KIP-392, "fetch from the closest replica").

A consumer that sends Fetch v11+ names its rack (``rack_id``, librdkafka's ``client.rack``). The leader
may answer with ``preferred_read_replica`` instead of records; the client then fetches that partition
from the named broker until an error or a broker failure sends it back to the leader. The decision is
pure and lives here; the replica manager gathers the facts (`ReplicaView`) and the fetch handler
answers.

Rules (Kafka's ``ReplicaManager.findPreferredReadReplica`` and its two built-in selectors):

* only the leader chooses, only for consumers (replica id -1, never for replication), and only if the
  broker sets ``replica.selector.class``; without it the leader serves everything (Kafka's default);
* a follower is a candidate only while it is in the ISR (an out-of-sync follower could keep the
  consumer behind the producer forever), known to be alive (an endpoint in the metadata), and holds the
  fetch offset (log start offset <= fetch offset <= log end offset, as last reported to the leader);
* ``RackAwareReplicaSelector``: with no client rack, or the leader in the client's rack, or no
  candidate in it, the leader; otherwise the candidate in that rack with the highest log end offset,
  then the one caught up most recently (then the lowest broker id, so the answer is deterministic);
* ``LeaderSelector``: always the leader;
* choosing the leader is answered as ``-1`` (no redirection), the records being served at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
SELECTORS = (RACK_AWARE_SELECTOR, LEADER_SELECTOR)
NO_PREFERRED_REPLICA = -1


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the leader knows of one replica when a consumer fetches."""

    broker_id: int
    rack: str | None
    log_start_offset: int
    log_end_offset: int
    ms_since_caught_up: int
    in_sync: bool = True
    alive: bool = True


def check_selector(name: str | None) -> str | None:
    """The configured selector class (None or empty: leader only); ValueError for an unknown class."""
    if not name:
        return None
    if name not in SELECTORS:
        raise ValueError(f"replica.selector.class: unknown class {name!r} (known: {', '.join(SELECTORS)})")
    return name


def _holds(view: ReplicaView, fetch_offset: int) -> bool:
    return view.in_sync and view.alive and view.log_start_offset <= fetch_offset <= view.log_end_offset


def select_rack_aware(
    client_rack: str | None, leader: ReplicaView, followers: Sequence[ReplicaView]
) -> ReplicaView:
    """Kafka's RackAwareReplicaSelector over replicas already filtered to the candidates."""
    if not client_rack or leader.rack == client_rack:
        return leader
    same_rack = [r for r in followers if r.rack == client_rack]
    if not same_rack:
        return leader
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.ms_since_caught_up, -r.broker_id))


def preferred_read_replica(
    selector: str | None,
    client_rack: str | None,
    leader: ReplicaView,
    followers: Sequence[ReplicaView],
    fetch_offset: int,
) -> int:
    """The broker the consumer should fetch from instead of the leader, or -1 to read here."""
    if selector != RACK_AWARE_SELECTOR:
        return NO_PREFERRED_REPLICA
    candidates = [f for f in followers if f.broker_id != leader.broker_id and _holds(f, fetch_offset)]
    chosen = select_rack_aware(client_rack, leader, candidates)
    return NO_PREFERRED_REPLICA if chosen.broker_id == leader.broker_id else chosen.broker_id
