"""``strom cluster describe`` and ``strom cluster elect-leaders``: cluster views through the Kafka protocol.

Describe prints the brokers (id, rack, address, controller mark), then the seeds' per-broker table for the
chosen topics: for each broker, in the rack-alternating order of the assignment, the partitions it
leads and those it follows as first, second, ... follower (Metadata's replica lists, whose first entry
is the preferred leader), each cell like ``P0 P6``; brokers are labelled ``R1-B0`` when racks are known.
Elect-leaders runs a preferred (or unclean) leader election through the ElectLeaders API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from confluent_kafka import ElectionType, KafkaException, TopicPartition

from strom.console.clients import ClientOptions, fail, wait
from strom.console.topics import admin_client


def _label(broker: Any) -> str:
    rack = getattr(broker, "rack", None)
    return f"{rack}-B{broker.id}" if rack else f"B{broker.id}"


def describe_cluster(options: ClientOptions, topics: Sequence[str], out: TextIO) -> None:
    admin = admin_client(options)
    try:
        md = admin.list_topics(timeout=options.timeout_s)
        described = wait(
            admin.describe_cluster(request_timeout=options.timeout_s), "cannot describe", options
        )
    except KafkaException as exc:
        raise fail("cannot fetch metadata", exc, options) from None
    racks = {node.id: node.rack for node in described.nodes}
    brokers = sorted(md.brokers.values(), key=lambda b: b.id)
    print(f"Cluster: {described.cluster_id}\tController: {md.controller_id}", file=out)
    for b in brokers:
        mark = "\t(controller)" if b.id == md.controller_id else ""
        print(f"Broker: {b.id}\tRack: {racks.get(b.id) or '-'}\tAddress: {b.host}:{b.port}{mark}", file=out)
    names = list(topics) or sorted(t for t in md.topics if not t.startswith("__"))
    for name in names:
        topic = md.topics.get(name)
        if topic is None or topic.error is not None:
            continue
        parts = [topic.partitions[p] for p in sorted(topic.partitions)]
        rf = max((len(p.replicas) for p in parts), default=0)
        order = _assignment_order(parts, [b.id for b in brokers])
        print(f"\nTopic: {name}", file=out)
        header = ["Brokers", "Leaders"] + ["Followers"] * (rf - 1)
        print("\t".join(header), file=out)
        for broker_id in order:
            label = _label(type("B", (), {"id": broker_id, "rack": racks.get(broker_id)})())
            cells = [
                " ".join(f"P{p.id}" for p in parts if len(p.replicas) > k and p.replicas[k] == broker_id)
                or "-"
                for k in range(rf)
            ]
            print("\t".join([label, *cells]), file=out)


def _assignment_order(parts: Sequence[Any], broker_ids: Sequence[int]) -> list[int]:
    """Brokers in the order partition leaders were assigned (P0's leader first), then the rest."""
    order: list[int] = []
    for p in parts:
        if p.replicas and p.replicas[0] not in order:
            order.append(p.replicas[0])
    return order + [b for b in broker_ids if b not in order]


def elect_leaders(options: ClientOptions, topics: Sequence[str], unclean: bool, out: TextIO) -> int:
    admin = admin_client(options)
    try:
        partitions = None
        if topics:
            md = admin.list_topics(timeout=options.timeout_s)
            partitions = [
                TopicPartition(t, p) for t in topics if t in md.topics for p in md.topics[t].partitions
            ]
        election = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
        result = wait(admin.elect_leaders(election, partitions), "leader election failed", options)
    except KafkaException as exc:
        raise fail("leader election failed", exc, options) from None
    failures = 0
    for tp, error in sorted((result or {}).items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        status = "elected" if error is None else str(error)
        if error is not None and "ELECTION_NOT_NEEDED" not in str(error):
            failures += 1
        print(f"{tp.topic}-{tp.partition}\t{status}", file=out)
    if not result:
        print("no partition needed a new leader", file=out)
    return 1 if failures else 0
