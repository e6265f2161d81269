"""SASL PLAIN and SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL with every real client; SCRAM
credentials managed through AlterUserScramCredentials; bad passwords, unknown mechanisms, requests
before authentication and the legacy v0 exchange, on the wire."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from strom.protocol.api import ApiKey
from strom.testing.broker_process import BrokerProcess
from tests.integration.certs import Pki, make_pki
from tests.integration.rawclient import RawClient
from tests.integration.secure_clients import CLIENTS, Security, kcat_args, roundtrip

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
SCRAM_PASSWORD = "scram-secret-ü"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(pki.broker),
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("sasl") / "data", overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        upserts = [
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(mech, 8192), SCRAM_PASSWORD.encode())
            for mech in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(timeout=30)
        yield broker


def _security(protocol: str, mechanism: str, pki: Pki, password: str | None = None) -> Security:
    if mechanism == "PLAIN":
        user, secret = "alice", "alice-secret"
    else:
        user, secret = "carol", SCRAM_PASSWORD
    ca = pki.ca if protocol == "SASL_SSL" else None
    return Security(protocol, ca=ca, mechanism=mechanism, username=user, password=password or secret)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", CLIENTS)
def test_sasl_ssl_roundtrip(sasl_broker: BrokerProcess, pki: Pki, client: str, mechanism: str) -> None:
    roundtrip(client, sasl_broker.listeners["SASL_SSL"], _security("SASL_SSL", mechanism, pki))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", CLIENTS)
def test_sasl_plaintext_roundtrip(sasl_broker: BrokerProcess, pki: Pki, client: str, mechanism: str) -> None:
    roundtrip(client, sasl_broker.listeners["SASL_PLAINTEXT"], _security("SASL_PLAINTEXT", mechanism, pki))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_refused_and_not_logged(sasl_broker: BrokerProcess, pki: Pki, mechanism: str) -> None:
    sec = _security("SASL_SSL", mechanism, pki, password="Wr0ngPassw0rd")
    failed = subprocess.run(
        [*kcat_args(sasl_broker.listeners["SASL_SSL"], sec), "-L", "-m", "5"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode != 0
    assert b"Authentication failed" in failed.stderr or b"SASL" in failed.stderr
    log = sasl_broker.log_path.read_text()
    assert f"SASL {mechanism} authentication from" in log
    for secret in ("Wr0ngPassw0rd", "alice-secret", "admin-secret", SCRAM_PASSWORD):
        assert secret not in log


def _kafka_error_code(frame: bytes, offset: int = 4) -> int:
    return int(struct.unpack_from(">h", frame, offset)[0])


def test_wire_rules(sasl_broker: BrokerProcess) -> None:
    bootstrap = sasl_broker.listeners["SASL_PLAINTEXT"]
    # A request other than ApiVersions/SaslHandshake before authentication: closed, no reply.
    with RawClient(bootstrap) as raw:
        raw.send(ApiKey.METADATA, 1, {"topics": None})
        assert raw.closed_by_peer()
    # ApiVersions is answered and advertises the SASL APIs; an unknown mechanism gets 33, then close.
    with RawClient(bootstrap) as raw:
        versions = raw.call(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
        assert keys[ApiKey.SASL_HANDSHAKE] == (0, 1)
        assert keys[ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS] == (0, 0)
        answer = raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == 33
        assert set(answer["mechanisms"]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert raw.closed_by_peer()
    # Malformed tokens: SASL_AUTHENTICATION_FAILED, then close (SaslAuthenticate v0, v1, v2).
    tokens = (b"no-nuls", b"\0alice\0", b"x\0alice\0alice-secret", b"\xff\0\xff\0\xff")
    for version, token in zip((0, 1, 2, 1), tokens, strict=True):
        with RawClient(bootstrap) as raw:
            assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            answer = raw.call(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})
            assert answer["error_code"] == 58
            assert raw.closed_by_peer()
    # SCRAM: a malformed first message is answered (58), never left hanging.
    with RawClient(bootstrap) as raw:
        assert raw.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        assert raw.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=,r="})["error_code"] == 58
    # The legacy exchange after SaslHandshake v0: a bare token frame, a bare empty reply, then Kafka.
    with RawClient(bootstrap) as raw:
        assert raw.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0alice\0alice-secret"
        raw.send_bytes(struct.pack(">i", len(token)) + token)
        assert raw.recv_frame() == b""
        assert raw.call(ApiKey.METADATA, 1, {"topics": None})["brokers"]
        # After authentication SaslAuthenticate is an illegal state.
        assert raw.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})["error_code"] == 34


def test_large_frames_refused_before_authentication(sasl_broker: BrokerProcess) -> None:
    # Before SASL completes a frame may hold at most 512 KiB (Kafka's sasl.server.max.receive.size),
    # not socket.request.max.bytes: the size prefix alone closes the connection, nothing is buffered.
    big = struct.pack(">i", 50 * 1024 * 1024) + b"\0" * 64
    with RawClient(sasl_broker.listeners["SASL_PLAINTEXT"]) as raw:
        raw.send_bytes(big)
        assert raw.closed_by_peer(timeout_s=5.0)
    with RawClient(sasl_broker.listeners["SASL_PLAINTEXT"]) as raw:
        assert raw.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        raw.send_bytes(big)  # read as a legacy token frame
        assert raw.closed_by_peer(timeout_s=5.0)
    # The same prefix on the PLAINTEXT listener is a frame still being received (within 100 MB).
    with RawClient(sasl_broker.listeners["PLAINTEXT"]) as raw:
        raw.send_bytes(big)
        assert not raw.closed_by_peer(timeout_s=0.5)


def test_describe_scram_credentials_of_many_users_answers(sasl_broker: BrokerProcess) -> None:
    # 100,000 names in one ~1 MB request: duplicates were found with list.count per name, 10^10
    # comparisons holding the event loop; now one pass. Duplicates still answer DUPLICATE_RESOURCE.
    names = [f"u{i}" for i in range(100_000)] + ["u7"]
    with RawClient(sasl_broker.bootstrap, timeout_s=60) as raw:
        answer = raw.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": n} for n in names]})
    codes = {r["user"]: r["error_code"] for r in answer["results"]}
    assert len(codes) == 100_000
    assert codes["u7"] == 92  # DUPLICATE_RESOURCE
    assert codes["u8"] == 91  # RESOURCE_NOT_FOUND


def test_scram_credentials_managed_with_the_admin_api(sasl_broker: BrokerProcess, pki: Pki) -> None:
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"first", salt=os.urandom(16)
    )
    admin.alter_user_scram_credentials([upsert])["dave"].result(timeout=30)
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 4096)]
    dave = Security("SASL_PLAINTEXT", mechanism="SCRAM-SHA-256", username="dave", password="first")
    roundtrip("confluent-kafka", sasl_broker.listeners["SASL_PLAINTEXT"], dave)
    # Rotation: the old password stops working, the new one works.
    rotate = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"second"
    )
    admin.alter_user_scram_credentials([rotate])["dave"].result(timeout=30)
    _refused(sasl_broker, dave)
    roundtrip(
        "kafka-python",
        sasl_broker.listeners["SASL_PLAINTEXT"],
        Security(**{**dave.__dict__, "password": "second"}),
    )
    # Kafka's checks: too few iterations, deleting what is not there.
    low = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4095), b"x")
    with pytest.raises(Exception, match=r"UNACCEPTABLE_CREDENTIAL|iterations"):
        admin.alter_user_scram_credentials([low])["erin"].result(timeout=30)
    missing = UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|no SCRAM-SHA-512"):
        admin.alter_user_scram_credentials([missing])["dave"].result(timeout=30)
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|no SCRAM credentials"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(timeout=30)
    # On the wire (flexible-only v0): a pair named twice, an unknown mechanism, an empty name.
    with RawClient(sasl_broker.bootstrap) as raw:
        upsert_raw = {
            "name": "dave",
            "mechanism": 1,
            "iterations": 4096,
            "salt": b"s",
            "salted_password": b"p",
        }
        answer = raw.call(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            0,
            {
                "deletions": [{"name": "dave", "mechanism": 1}, {"name": "", "mechanism": 1}],
                "upsertions": [upsert_raw, {**upsert_raw, "name": "frank", "mechanism": 3}],
            },
        )
        codes = {r["user"]: r["error_code"] for r in answer["results"]}
        assert codes == {"dave": 92, "": 93, "frank": 33}
        described = raw.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
        users = {r["user"]: r["credential_infos"] for r in described["results"]}
        assert users["carol"] == [{"mechanism": 1, "iterations": 8192}, {"mechanism": 2, "iterations": 8192}]
    # Deletion: the user can no longer log in.
    delete = UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)
    admin.alter_user_scram_credentials([delete])["dave"].result(timeout=30)
    _refused(sasl_broker, Security(**{**dave.__dict__, "password": "second"}))
    # Kept across a restart (in the metadata store): a user made through the admin API still logs in,
    # a deleted one is still refused.
    gina = UserScramCredentialUpsertion(
        "gina", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"gina-secret"
    )
    admin.alter_user_scram_credentials([gina])["gina"].result(timeout=30)
    sasl_broker.restart()
    roundtrip(
        "confluent-kafka",
        sasl_broker.listeners["SASL_PLAINTEXT"],
        Security("SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username="gina", password="gina-secret"),
    )
    _refused(sasl_broker, Security(**{**dave.__dict__, "password": "second"}))
    # The broker stores salted keys, never the password: no file under its data dir holds one.
    stored = b"".join(p.read_bytes() for p in sasl_broker.data_dir.rglob("*") if p.is_file())
    for secret in (SCRAM_PASSWORD.encode(), b"gina-secret", hashlib.sha256(b"second").hexdigest().encode()):
        assert secret not in stored
    assert b"gina" in stored  # the search did reach the stored credentials


def _refused(broker: BrokerProcess, sec: Security) -> None:
    failed = subprocess.run(
        [*kcat_args(broker.listeners["SASL_PLAINTEXT"], sec), "-L", "-m", "5"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert failed.returncode != 0, failed.stdout[:200]


def test_describe_configs_hides_the_jaas_config(sasl_broker: BrokerProcess) -> None:
    with RawClient(sasl_broker.bootstrap) as raw:
        answer = raw.call(
            ApiKey.DESCRIBE_CONFIGS,
            1,
            {
                "resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}],
                "include_synonyms": False,
            },
        )
    entries = {c["name"]: c for c in answer["results"][0]["configs"]}
    jaas = entries["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert jaas["value"] is None and jaas["is_sensitive"] is True
    assert entries["ssl.keystore.location"]["is_sensitive"] is False
    assert "alice-secret" not in repr(answer)
