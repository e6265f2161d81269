"""Three brokers logging in to each other with SCRAM-SHA-512 over SASL_SSL, as Kafka's docs set it up:
the brokers' own SCRAM user (and a client's) is written into ZooKeeper before any broker starts
(`strom users create --zookeeper`, Kafka's `kafka-configs.sh --zookeeper`), then replication, the
controller's requests and fail-over after kill -9 of a leader all run over that listener, and a client
reads everything back."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import wait_until
from tests.cluster.secure_cluster import replicate_fail_over_read_back, sasl_ssl_brokers
from tests.integration.certs import Pki, make_pki
from tests.integration.secure_clients import Security, librdkafka_settings
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster

BROKER_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)


def _strom(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "strom.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def _create_user(zk: ZooKeeperProcess, tmp_path: Path, user: str, password: str) -> None:
    secret = tmp_path / f"{user}.password"
    secret.write_text(password + "\n")
    create = ("users", "create", user, "--zookeeper", zk.connect, "--password-file", str(secret))
    done = _strom(*create, "--mechanism", "SCRAM-SHA-512")
    assert done.returncode == 0, done.stderr
    assert f"Created user {user}" in done.stdout
    again = _strom(*create)  # create refuses an existing user, as over the Kafka protocol
    assert again.returncode == 1 and "already exists" in again.stderr


@pytest.fixture
def scram_cluster(tmp_path: Path) -> Iterator[tuple[list[BrokerProcess], Pki]]:
    require_zookeeper()
    pki = make_pki(tmp_path / "pki")
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start()
    try:
        _create_user(zk, tmp_path, "broker", "broker-secret")
        _create_user(zk, tmp_path, "alice", "alice-secret")
        settings = {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": BROKER_JAAS,
        }
        with sasl_ssl_brokers(zk, tmp_path, pki, settings) as brokers:
            yield brokers, pki
    finally:
        zk.stop()


def _alice(pki: Pki, bootstrap: str) -> dict[str, Any]:
    sec = Security(
        "SASL_SSL", ca=pki.ca, mechanism="SCRAM-SHA-512", username="alice", password="alice-secret"
    )
    return {"bootstrap.servers": bootstrap, **librdkafka_settings(sec)}


def test_brokers_replicate_and_fail_over_logged_in_with_scram_sha_512(
    scram_cluster: tuple[list[BrokerProcess], Pki],
) -> None:
    brokers, pki = scram_cluster
    bootstrap = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient(_alice(pki, bootstrap))
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")

    def brokers_logged_in_to_each_other() -> None:
        # Followers fetch (and the controller sends LeaderAndIsr) logged in as the brokers' SCRAM user.
        follower_logins = [
            line
            for b in brokers
            for line in b.log_path.read_text().splitlines()
            if "SASL SCRAM-SHA-512 connection" in line and "as User:broker" in line
        ]
        assert len(follower_logins) >= 2, "no broker logged in to another with SCRAM"

    replicate_fail_over_read_back(brokers, _alice(pki, bootstrap), "scram", brokers_logged_in_to_each_other)
