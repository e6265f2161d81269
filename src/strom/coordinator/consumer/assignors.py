"""The server-side assignors of consumer groups: ``uniform`` and ``range`` (pure).

An assignor maps the members' subscriptions and the subscribed topics' partition counts to a target
assignment. It runs on the coordinator whenever the group epoch moves past the assignment epoch.
`group.consumer.assignors` lists the ones a broker offers (Kafka's class names or their short names),
the first being the default; a member may name one (``ServerAssignor``), and the group uses the one
most of its members name (ties: the configured order).

* **uniform** (Kafka's ``UniformAssignor``): every member gets as many partitions as the others, give
  or take one, among those of topics it subscribes to, and partitions stay where they are when they can
  (sticky): a member joining or leaving moves only the partitions needed to rebalance. First each
  partition stays with its current target owner if that member still subscribes to its topic; the
  unassigned ones go, most constrained first, to the eligible member with the fewest; then partitions
  move one at a time from a member with more to an eligible member with at least two fewer, until no
  such move is left. **Rack-aware** (KIP-881's racks on the server side, as Kafka 3.7's uniform assignor
  was; Kafka 3.8 removed that, KAFKA-16694, so here Strom goes beyond Kafka 4): when members
  name their rack (``client.rack``, the heartbeat's ``RackId``) and the partitions' replicas are on
  brokers with a ``broker.rack``, a partition goes, where balance allows, to a member in a rack that
  holds one of its replicas (so the consumer can fetch from a replica in its own rack, KIP-392): ties
  of the steps above go to such a member, then a partition held outside the racks of its replicas
  moves to an eligible member in one of them when that keeps the balance (a move to a member with
  fewer partitions, or a swap with a partition that member holds outside its own rack). Each such
  step places one more partition in its consumer's rack, so it ends; with nothing to improve, an
  assignment stays as it is (sticky). Members without a rack, or partitions whose replicas' racks
  are unknown, are placed by balance alone.
* **range** (Kafka's ``RangeAssignor``): per topic, the subscribed members in member-id order get
  contiguous ranges, the first ``partitions % members`` one partition more: co-partitioned topics get
  the same partition numbers on the same member. Not rack-aware, as Kafka's server-side range
  assignor is not.

Deterministic: the same inputs give the same assignment (members and partitions are walked in order).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from strom.coordinator.consumer.records import Assignment

UNIFORM = "uniform"
RANGE = "range"
# Kafka's class names for the same assignors (what `group.consumer.assignors` holds by default there).
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}

Subscriptions = Mapping[str, Collection[str]]  # member id -> subscribed topics
TopicPartitionCounts = Mapping[str, int]
MemberRacks = Mapping[str, str | None]  # member id -> the rack it named (None: none)
PartitionRacks = Callable[[str, int], Collection[str]]  # (topic, partition) -> racks of its replicas


def no_racks(topic: str, partition: int) -> Collection[str]:
    """The replica racks of a cluster that knows none."""
    return ()


class _Racks:
    """Whether a member is in a rack that holds a replica of a partition (looked up once each)."""

    def __init__(self, members: MemberRacks, replicas: PartitionRacks) -> None:
        self._members = {m: r for m, r in members.items() if r}
        self._replicas = replicas
        self._cache: dict[tuple[str, int], Collection[str]] = {}

    def __bool__(self) -> bool:
        return bool(self._members)

    def match(self, member: str, tp: tuple[str, int]) -> bool:
        rack = self._members.get(member)
        if rack is None:
            return False
        found = self._cache.get(tp)
        if found is None:
            found = self._cache[tp] = frozenset(self._replicas(*tp))
        return rack in found


def short_name(name: str) -> str | None:
    """``uniform``/``range`` for either spelling, None for an assignor this broker does not have."""
    name = name.strip()
    if name in (UNIFORM, RANGE):
        return name
    return _CLASS_NAMES.get(name)


def choose(configured: list[str], requested: Collection[str | None]) -> str:
    """The group's assignor: the one most members name, else the broker's default (first configured)."""
    counts: dict[str, int] = {}
    for name in requested:
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return configured[0]
    return max(counts, key=lambda n: (counts[n], -configured.index(n) if n in configured else -99))


def assign(
    name: str,
    subscriptions: Subscriptions,
    topics: TopicPartitionCounts,
    current: Mapping[str, Assignment],
    member_racks: MemberRacks | None = None,
    partition_racks: PartitionRacks = no_racks,
) -> dict[str, Assignment]:
    if name == UNIFORM:
        return uniform(subscriptions, topics, current, member_racks, partition_racks)
    return range_assign(subscriptions, topics, current)


def _freeze(out: Mapping[str, Mapping[str, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in parts.items() if ps} for m, parts in out.items()}


def range_assign(
    subscriptions: Subscriptions, topics: TopicPartitionCounts, current: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    del current  # ranges depend on the members alone
    out: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
    for topic in sorted(topics):
        members = sorted(m for m, subs in subscriptions.items() if topic in subs)
        if not members:
            continue
        count = topics[topic]
        base, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = base + (1 if i < extra else 0)
            if size:
                out[member][topic] = set(range(start, start + size))
            start += size
    return _freeze(out)


def uniform(
    subscriptions: Subscriptions,
    topics: TopicPartitionCounts,
    current: Mapping[str, Assignment],
    member_racks: MemberRacks | None = None,
    partition_racks: PartitionRacks = no_racks,
) -> dict[str, Assignment]:
    racks = _Racks(member_racks or {}, partition_racks)
    members = sorted(subscriptions)
    eligible: dict[str, list[str]] = {
        topic: [m for m in members if topic in subscriptions[m]] for topic in sorted(topics)
    }
    owner: dict[tuple[str, int], str] = {}
    load = dict.fromkeys(members, 0)
    # Sticky first: a partition stays with its current owner if that member still wants its topic.
    for member in members:
        for topic, ps in sorted(current.get(member, {}).items()):
            if topic not in topics or topic not in subscriptions[member]:
                continue
            for p in sorted(ps):
                if p < topics[topic] and (topic, p) not in owner:
                    owner[(topic, p)] = member
                    load[member] += 1
    # Then the unassigned partitions, those with the fewest candidates first.
    free = [
        (len(eligible[t]), t, p)
        for t in sorted(topics)
        for p in range(topics[t])
        if eligible[t] and (t, p) not in owner
    ]
    for _, topic, p in sorted(free):
        best = min(eligible[topic], key=lambda m: (load[m], not racks.match(m, (topic, p)), m))
        owner[(topic, p)] = best
        load[best] += 1
    _balance(owner, load, eligible, racks)
    if racks:
        _place_in_racks(owner, load, eligible, racks)
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for (topic, p), member in owner.items():
        out[member].setdefault(topic, set()).add(p)
    return _freeze(out)


def _balance(
    owner: dict[tuple[str, int], str], load: dict[str, int], eligible: Mapping[str, list[str]], racks: _Racks
) -> None:
    """Move single partitions from the most loaded members to eligible ones with two fewer or more
    (first those outside their owner's rack, to a member in one of their racks on a tie)."""
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-load[owner[tp]], racks.match(owner[tp], tp), tp)):
            source = owner[tp]
            target = min(eligible[tp[0]], key=lambda m: (load[m], not racks.match(m, tp), m))
            if load[target] + 1 < load[source]:
                owner[tp] = target
                load[source] -= 1
                load[target] += 1
                moved = True
                break


def _place_in_racks(
    owner: dict[tuple[str, int], str], load: dict[str, int], eligible: Mapping[str, list[str]], racks: _Racks
) -> None:
    """Move partitions held outside their replicas' racks to a member in one of them, keeping the
    balance: to a member with fewer partitions, or swapped with one that member holds outside its own
    rack and their owner may take. Every step places one more partition in its consumer's rack."""
    held: dict[str, set[tuple[str, int]]] = {m: set() for m in load}
    for tp, member in owner.items():
        held[member].add(tp)

    def move(tp: tuple[str, int], target: str) -> None:
        source = owner[tp]
        held[source].discard(tp)
        held[target].add(tp)
        owner[tp] = target
        load[source] -= 1
        load[target] += 1

    improved = True
    while improved:
        improved = False
        for tp in sorted(owner):
            source = owner[tp]
            if racks.match(source, tp):
                continue
            for target in eligible[tp[0]]:
                if target == source or not racks.match(target, tp):
                    continue
                if load[target] < load[source]:
                    move(tp, target)
                    improved = True
                    break
                back = next(
                    (
                        other
                        for other in sorted(held[target])
                        if not racks.match(target, other) and source in eligible[other[0]]
                    ),
                    None,
                )
                if back is not None:
                    move(tp, target)
                    move(back, source)
                    improved = True
                    break
