"""``strom cluster describe`` and ``strom cluster elect-leaders``: cluster views through the Kafka protocol.

Describe prints the brokers (id, rack, address, controller mark), then the per-broker table for the
chosen topics (`strom.cluster.broker_table`, the same table the web console draws): for each broker, in
the order of the assignment, the partitions it leads and those it follows as first, second, ... follower
(Metadata's replica lists, whose first entry is the preferred leader), each cell like ``P0 P6``, with
marks where leadership moved or a replica is out of sync; brokers are labelled ``R1-B0`` when racks are
known.
Elect-leaders runs a preferred (or unclean) leader election through the ElectLeaders API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TextIO

from confluent_kafka import ElectionType, KafkaException, TopicPartition

from strom.cluster.broker_table import LEGEND, PartitionState, broker_table, cell_mark, render_text
from strom.console.clients import ClientOptions, fail, wait
from strom.console.errors import ConsoleError
from strom.console.topics import admin_client


def _check_named(known: Mapping[str, object], names: Sequence[str]) -> None:
    """Topics named on the command line must exist (checked before anything is printed or elected)."""
    missing = [name for name in dict.fromkeys(names) if name not in known]
    if missing:
        raise ConsoleError(f"unknown topic(s): {', '.join(missing)}")


def describe_cluster(options: ClientOptions, topics: Sequence[str], out: TextIO) -> None:
    admin = admin_client(options)
    try:
        md = admin.list_topics(timeout=options.timeout_s)
        described = wait(
            admin.describe_cluster(request_timeout=options.timeout_s), "cannot describe", options
        )
    except KafkaException as exc:
        raise fail("cannot fetch metadata", exc, options) from None
    _check_named(md.topics, topics)
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
        states = [
            PartitionState(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in topic.partitions.values()
        ]
        table = broker_table(states, racks, {b.id for b in brokers})
        print(f"\nTopic: {name}", file=out)
        print(render_text(table), file=out)
        if any(cell_mark(c, k) for row in table.rows for k, col in enumerate(row.columns) for c in col):
            print(LEGEND, file=out)


def elect_leaders(options: ClientOptions, topics: Sequence[str], unclean: bool, out: TextIO) -> int:
    admin = admin_client(options)
    try:
        partitions = None
        if topics:
            md = admin.list_topics(timeout=options.timeout_s)
            _check_named(md.topics, topics)
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
