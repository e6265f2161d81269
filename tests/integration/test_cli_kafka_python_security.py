"""`strom transactions` and `strom topics reassign` (kafka-python) against a SASL_SSL listener with
SCRAM-SHA-256, from librdkafka's properties given as ``--command-config``; certificates made at test
time. A wrong password is one clear error line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strom.testing.broker_process import BrokerProcess
from tests.integration.certs import Pki, make_pki
from tests.integration.secure_clients import Security, librdkafka_settings

from .test_transactions import create_topic, txn_producer

STROM = [sys.executable, "-m", "strom.cli.main"]
PASSWORD = "carol-secret"
REQUEST_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "ssl.keystore.location": str(pki.broker),
        "transaction.state.log.num.partitions": "1",
    }
    with BrokerProcess(tmp_path_factory.mktemp("kpsec") / "data", overrides) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        upsert = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD.encode()
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        yield proc


def _strom(broker: BrokerProcess, pki: Pki, password: str, *args: str) -> subprocess.CompletedProcess[str]:
    sec = Security("SASL_SSL", ca=pki.ca, mechanism="SCRAM-SHA-256", username="carol", password=password)
    config = [
        arg
        for key, value in librdkafka_settings(sec).items()
        for arg in ("--command-config", f"{key}={value}")
    ]
    return subprocess.run(
        [
            *STROM,
            "--bootstrap-server",
            broker.listeners["SASL_SSL"],
            "--request-timeout-s",
            str(REQUEST_TIMEOUT_S),
            *config,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_transactions_list_over_sasl_ssl(broker: BrokerProcess, pki: Pki) -> None:
    topic = create_topic(broker.bootstrap)
    tid = f"sec-{uuid.uuid4().hex[:8]}"
    producer = txn_producer(broker.bootstrap, tid)
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"x")
    producer.commit_transaction(30)
    listed = _strom(broker, pki, PASSWORD, "transactions", "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[0] == "TRANSACTIONAL-ID"
    assert [row.split()[0] for row in rows] == [tid]


def test_reassign_verify_over_sasl_ssl(broker: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    topic = create_topic(broker.bootstrap)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [0]}]})
    )
    verified = _strom(
        broker, pki, PASSWORD, "topics", "reassign", "--reassignment-json-file", str(plan), "--verify"
    )
    assert verified.returncode == 0, verified.stderr
    assert f"Reassignment of partition {topic}-0 is completed." in verified.stdout


def test_wrong_password_is_one_clear_error(broker: BrokerProcess, pki: Pki) -> None:
    started = time.monotonic()
    refused = _strom(broker, pki, "not-the-password", "transactions", "list")
    assert refused.returncode == 1
    at = broker.listeners["SASL_SSL"]
    # The broker's reason when kafka-python read the answer before the close, else what it saw.
    assert refused.stderr in (
        f"strom: error: SASL authentication refused by {at}: {reason}\n"
        for reason in (
            "Authentication failed during SCRAM-SHA-256: invalid credentials",
            "the connection was closed during the SASL exchange (wrong credentials?)",
        )
    ), refused.stderr
    assert time.monotonic() - started < REQUEST_TIMEOUT_S  # refused at once, not retried until the timeout


def test_a_missing_ca_file_is_named(broker: BrokerProcess, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    sec = Security("SSL", ca=missing)
    config = [a for k, v in librdkafka_settings(sec).items() for a in ("--command-config", f"{k}={v}")]
    done = subprocess.run(
        [*STROM, "--bootstrap-server", broker.listeners["SASL_SSL"], *config, "transactions", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        1,
        f"strom: error: --command-config ssl.ca.location={missing}: no such file\n",
    )
