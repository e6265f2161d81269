"""Transaction admin APIs on a 3-broker ZooKeeper cluster: every broker lists the transactional ids it
coordinates (ListTransactions), only an id's coordinator describes it (NOT_COORDINATOR elsewhere), and
kafka-python's admin client and `strom transactions list` fan out and merge as Kafka's tools do."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.integration.rawclient import RawClient

TXN = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "1"}


def test_list_per_broker_and_describe_at_the_coordinator(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **TXN)
    topic = f"adm-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producers: dict[str, Producer] = {}
    for i in range(6):  # ids spread over the three __transaction_state partitions
        tid = f"adm-{i}-{uuid.uuid4().hex[:4]}"
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(topic, b"x", partition=i % 3)
        assert producer.flush(30) == 0
        producers[tid] = producer
    addresses = {i: b.bootstrap for i, b in cluster.brokers.items()}

    coordinator: dict[str, int] = {}
    with RawClient(cluster.bootstrap.split(",")[0]) as raw:
        for tid in producers:
            found = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
            coordinator[tid] = int(found["node_id"])
    assert len(set(coordinator.values())) > 1  # the test needs ids on more than one coordinator

    listed: dict[int, set[str]] = {}
    for node, address in addresses.items():
        with RawClient(address) as raw:
            body = {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1}
            resp = raw.call(ApiKey.LIST_TRANSACTIONS, 1, body)
            assert resp["error_code"] == 0
            listed[node] = {t["transactional_id"] for t in resp["transaction_states"]} & set(producers)
            for tid in producers:
                (desc,) = raw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})[
                    "transaction_states"
                ]
                if coordinator[tid] == node:
                    assert (desc["error_code"], desc["transaction_state"]) == (0, "Ongoing")
                else:
                    assert desc["error_code"] == ErrorCode.NOT_COORDINATOR
    for node, ids in listed.items():
        assert ids == {tid for tid, c in coordinator.items() if c == node}  # each lists only its own

    from kafka.admin import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        merged = kp.list_transactions(state_filters=["Ongoing"])
        assert {
            node: {t.transactional_id for t in rows} & set(producers) for node, rows in merged.items()
        } == listed
        described = kp.describe_transactions(list(producers))
        assert {tid: d.coordinator_id for tid, d in described.items()} == coordinator
    finally:
        kp.close()

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "--bootstrap-server",
            cluster.bootstrap,
            "transactions",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [line.split() for line in cli.stdout.splitlines()[1:]]
    assert {r[0]: int(r[1]) for r in rows if r[0] in producers} == coordinator
    for producer in producers.values():
        producer.abort_transaction(60)


def _describe(address: str, tid: str) -> dict[str, Any]:
    with RawClient(address) as raw:
        (desc,) = raw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})[
            "transaction_states"
        ]
    return dict(desc)


def test_a_commit_waiting_for_a_marker_is_described_and_listed_as_hanging(make_cluster: Any) -> None:
    """A partition leader dies after the records and before the COMMIT marker: the coordinator holds the
    transaction in PrepareCommit, DescribeTransactions lists just the partition still without its marker,
    and `strom transactions list --hanging` reports it once it has been open past
    transaction.max.timeout.ms; the broker's return lets the marker land (CompleteCommit)."""
    cluster: LocalCluster = make_cluster(3, **TXN, transaction_max_timeout_ms="4000")
    topic = f"prep-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    leaders = {p.id: p.leader for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
    tid = f"prep-{uuid.uuid4().hex[:6]}"
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 4000}
    )
    producer.init_transactions(60)
    with RawClient(cluster.bootstrap.split(",")[0]) as raw:
        coordinator = int(raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})["node_id"])
    (victim_partition, victim) = next((p, b) for p, b in sorted(leaders.items()) if b != coordinator)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, b"v", partition=p)
    assert producer.flush(30) == 0
    cluster.brokers[victim].kill()
    producer.commit_transaction(60)  # answered once PrepareCommit is durable; markers follow
    address = cluster.brokers[coordinator].bootstrap
    desc = _describe(address, tid)
    assert desc["transaction_state"] == "PrepareCommit"
    wait = time.monotonic() + 10
    while _describe(address, tid)["topics"] != [{"topic": topic, "partitions": [victim_partition]}]:
        assert time.monotonic() < wait, _describe(address, tid)
        time.sleep(0.2)
    time.sleep(4.5)  # past transaction.max.timeout.ms
    alive = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != victim)
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "--bootstrap-server",
            alive,
            "transactions",
            "list",
            "--hanging",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    (row,) = [line.split() for line in cli.stdout.splitlines()[1:] if line.split()[0] == tid]
    assert (row[1], row[4], row[-1]) == (str(coordinator), "PrepareCommit", f"{topic}-{victim_partition}")
    cluster.brokers[victim].start()
    wait = time.monotonic() + 60
    while _describe(address, tid)["transaction_state"] != "CompleteCommit":
        assert time.monotonic() < wait, "the marker did not land after the leader came back"
        time.sleep(0.5)


def test_every_replica_describes_the_producers_it_replicated(make_cluster: Any) -> None:
    """DescribeProducers is answered by any replica from its own producer state (Kafka's
    Partition.activeProducerState): followers rebuild it from the batches they fetch."""
    cluster: LocalCluster = make_cluster(3, **TXN)
    topic = f"rep-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": f"rep-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic, b"v", partition=0)
    assert producer.flush(30) == 0

    def states() -> list[list[tuple[int, int, int, int]]]:
        out = []
        for broker in cluster.brokers.values():
            with RawClient(broker.bootstrap) as raw:
                body = {"topics": [{"name": topic, "partition_indexes": [0]}]}
                (part,) = raw.call(ApiKey.DESCRIBE_PRODUCERS, 0, body)["topics"][0]["partitions"]
            assert part["error_code"] == 0, part
            out.append(
                [
                    (p["producer_id"], p["producer_epoch"], p["last_sequence"], p["current_txn_start_offset"])
                    for p in part["active_producers"]
                ]
            )
        return out

    deadline = time.monotonic() + 20
    while len({tuple(s) for s in states()}) != 1:  # the followers fetch within a moment
        assert time.monotonic() < deadline, states()
        time.sleep(0.2)
    ((pid, epoch, last_sequence, start_offset),) = states()[0]
    assert (epoch, last_sequence, start_offset) == (0, 2, 0) and pid >= 0
    producer.abort_transaction(60)
