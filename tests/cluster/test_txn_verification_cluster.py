"""KIP-890 part 1 on a 3-broker ZooKeeper cluster: the partition's leader is not the transaction's
coordinator, so it verifies over the inter-broker client (AddPartitionsToTxn v4 ``verify_only``).

A batch for a partition the transaction never added is refused there (INVALID_TXN_STATE); with
``transaction.partition.verification.enable=false`` (the cluster default, changed at run time) the
same batch is appended and leaves the partition's last stable offset hanging; a confluent-kafka
transactional producer over every partition commits as before.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Producer

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of
from tests.cluster.test_transactions_cluster import TXN, create_topic, find_coordinator
from tests.integration.eos import consume_all
from tests.integration.rawclient import RawClient
from tests.integration.test_dynamic_broker_config import set_cluster_default
from tests.integration.test_transactions import committed_end
from tests.integration.test_txn_verification import VERIFICATION, RawTransaction


def _setting_seen(cluster: LocalCluster, value: str) -> None:
    """Every broker reads the cluster default from the metadata store: wait until each reports it."""
    deadline = time.monotonic() + 30
    for broker_id, proc in cluster.brokers.items():
        while True:
            with RawClient(proc.bootstrap) as raw:
                resource = {
                    "resource_type": 4,
                    "resource_name": str(broker_id),
                    "configuration_keys": [VERIFICATION],
                }
                body = {"resources": [resource], "include_synonyms": False}
                (result,) = raw.call(ApiKey.DESCRIBE_CONFIGS, 1, body)["results"]
            if any(c["name"] == VERIFICATION and c["value"] == value for c in result["configs"]):
                break
            assert time.monotonic() < deadline, result
            time.sleep(0.2)


def test_the_leader_verifies_with_a_coordinator_on_another_broker(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **TXN)
    topic = f"verify-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, 3)
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    coordinator = find_coordinator(cluster.bootstrap, probe)
    leaders = {p: leader for p, (leader, _, _) in partitions_of(cluster.bootstrap, topic).items()}
    remote = [p for p, leader in leaders.items() if leader != coordinator]
    assert len(remote) >= 1, leaders  # three partitions, three brokers: at least one elsewhere
    stray, added = remote[0], next(p for p in leaders if p != remote[0])

    with (
        RawClient(cluster.brokers[coordinator].bootstrap) as coord_raw,
        RawClient(cluster.brokers[leaders[stray]].bootstrap) as stray_raw,
        RawClient(cluster.brokers[leaders[added]].bootstrap) as added_raw,
    ):
        txn = RawTransaction(coord_raw, topic, probe)
        assert txn.add(added) == ErrorCode.NONE
        txn.raw = added_raw
        assert txn.produce(added) == ErrorCode.NONE
        txn.raw = stray_raw
        assert txn.produce(stray) == ErrorCode.INVALID_TXN_STATE  # asked of the coordinator, remotely
        txn.raw = coord_raw
        assert txn.end(commit=True) == ErrorCode.NONE
    assert committed_end(cluster.brokers[leaders[stray]].bootstrap, topic, stray) == (0, 0)

    set_cluster_default(cluster.bootstrap, **{VERIFICATION: "false"})
    _setting_seen(cluster, "false")
    with (
        RawClient(cluster.brokers[coordinator].bootstrap) as coord_raw,
        RawClient(cluster.brokers[leaders[stray]].bootstrap) as stray_raw,
    ):
        txn = RawTransaction(coord_raw, topic, probe)
        assert txn.add(added) == ErrorCode.NONE
        txn.raw = stray_raw
        assert txn.produce(stray, b"stray") == ErrorCode.NONE
        txn.raw = coord_raw
        assert txn.end(commit=True) == ErrorCode.NONE
    time.sleep(1.0)
    assert committed_end(cluster.brokers[leaders[stray]].bootstrap, topic, stray) == (0, 1)  # hanging
    set_cluster_default(cluster.bootstrap, **{VERIFICATION: "true"})
    _setting_seen(cluster, "true")

    other = f"{topic}-clients"
    create_topic(cluster.bootstrap, other, 3)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": f"cv-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(60)
    for round_ in range(3):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(other, f"{round_}-{i}".encode(), partition=i % 3)
        producer.commit_transaction(60)
    got = consume_all(cluster.bootstrap, other, "read_committed", 3)
    assert sorted(got) == sorted(f"{r}-{i}".encode() for r in range(3) for i in range(30))
