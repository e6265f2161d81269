"""A 3-broker cluster talking SASL_SSL between brokers (plus a PLAINTEXT listener): brokers replicate
and fail over over it with their own PLAIN login and host-name verification, Metadata answers with each
listener's addresses, and a SCRAM user created through one broker (stored in
ZooKeeper's /config/users) logs in on another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import wait_until
from tests.cluster.secure_cluster import replicate_fail_over_read_back, sasl_ssl_brokers
from tests.integration.certs import Pki, make_pki
from tests.integration.secure_clients import Security, librdkafka_settings, roundtrip
from tests.prerequisites import require_zookeeper

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";'
)


@pytest.fixture
def secure_cluster(tmp_path: Path) -> Iterator[tuple[list[BrokerProcess], Pki]]:
    require_zookeeper()
    pki = make_pki(tmp_path / "pki")
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start()
    settings = {
        "listeners": "SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    }
    try:
        with sasl_ssl_brokers(zk, tmp_path, pki, settings) as brokers:
            yield brokers, pki
    finally:
        zk.stop()


def _client(pki: Pki, bootstrap: str) -> dict[str, Any]:
    sec = Security("SASL_SSL", ca=pki.ca, mechanism="PLAIN", username="alice", password="alice-secret")
    return {"bootstrap.servers": bootstrap, **librdkafka_settings(sec)}


def test_sasl_ssl_cluster_replicates_fails_over_and_shares_scram_users(
    secure_cluster: tuple[list[BrokerProcess], Pki],
) -> None:
    brokers, pki = secure_cluster
    bootstrap = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient(_client(pki, bootstrap))
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")
    # Metadata names every broker at its address on the listener the client is connected to.
    secured = {b.id: f"{b.host}:{b.port}" for b in admin.list_topics(timeout=5).brokers.values()}
    assert secured == {i: b.listeners["SASL_SSL"] for i, b in enumerate(brokers)}
    plain_admin = AdminClient({"bootstrap.servers": brokers[2].listeners["PLAINTEXT"]})
    plain = {b.id: f"{b.host}:{b.port}" for b in plain_admin.list_topics(timeout=5).brokers.values()}
    assert plain == {i: b.listeners["PLAINTEXT"] for i, b in enumerate(brokers)}
    leader = replicate_fail_over_read_back(brokers, _client(pki, bootstrap), "secure")
    # A SCRAM user created through one broker logs in on another.
    live = [b for i, b in enumerate(brokers) if i != leader]
    upsert = UserScramCredentialUpsertion(
        "zed", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"zed-secret"
    )
    creator = AdminClient(_client(pki, live[0].bootstrap))
    creator.alter_user_scram_credentials([upsert])["zed"].result(30)
    zed = Security("SASL_SSL", ca=pki.ca, mechanism="SCRAM-SHA-512", username="zed", password="zed-secret")
    wait_until(
        lambda: roundtrip("kcat", live[1].bootstrap, zed, count=2) is None,
        30,
        "zed logs in on another broker",
    )
