"""HTTP authentication on the broker's HTTP side: Basic against the PLAIN JAAS users and the SCRAM
credentials (on by default once a Kafka listener uses SASL), client certificates on an ``https://``
listener, 401 with ``WWW-Authenticate``; judged by confluent-kafka's SchemaRegistryClient, plain urllib
requests and headless Chromium logging in to the console."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from selenium.webdriver.common.by import By

from strom.testing.broker_process import BrokerProcess
from tests.browser import chromium, screenshot
from tests.integration.certs import Pki, make_pki, name

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
AVRO = json.dumps({"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]})


def _scram_user(broker: BrokerProcess, user: str, password: bytes) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A SASL listener for clients: its HTTP side authenticates without being asked to."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "http.listeners": "http://127.0.0.1:0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("http-auth") / "data", overrides) as broker:
        _scram_user(broker, "carol", b"carol-secret")
        yield broker


def _get(
    url: str, auth: tuple[str, str] | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header(
            "Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _registry(broker: BrokerProcess, user_info: str | None) -> SchemaRegistryClient:
    assert broker.http_url is not None
    conf = {"url": broker.http_url}
    if user_info is not None:
        conf["basic.auth.user.info"] = user_info
    return SchemaRegistryClient(conf)


def test_registry_client_with_plain_and_scram_users(sasl_broker: BrokerProcess) -> None:
    subject = f"auth-{uuid.uuid4().hex[:8]}-value"
    schema_id = _registry(sasl_broker, "alice:alice-secret").register_schema(subject, Schema(AVRO, "AVRO"))
    # A SCRAM user (stored credential, no password kept by the broker) reads it back.
    latest = _registry(sasl_broker, "carol:carol-secret").get_latest_version(subject)
    assert latest.schema_id == schema_id
    for user_info in (None, "alice:wrong", "carol:alice-secret", "nobody:x"):
        with pytest.raises(SchemaRegistryError) as refused:
            _registry(sasl_broker, user_info).get_subjects()
        assert refused.value.http_status_code == 401, user_info


def _strom_schemas_list(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``strom schemas list`` with only ``env``'s registry settings (none inherited from the caller's)."""
    command = [sys.executable, "-m", "strom.cli.main", "schemas", "list", "--registry", url]
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STROM_SCHEMA_REGISTRY")}
    return subprocess.run(
        command, env={**inherited, **env}, capture_output=True, text=True, check=False, timeout=60
    )


def test_strom_schemas_sends_user_info_from_the_environment(sasl_broker: BrokerProcess) -> None:
    subject = f"cli-{uuid.uuid4().hex[:8]}-value"
    _registry(sasl_broker, "alice:alice-secret").register_schema(subject, Schema(AVRO, "AVRO"))
    url = str(sasl_broker.http_url)
    listed = _strom_schemas_list(url, STROM_SCHEMA_REGISTRY_USER_INFO="carol:carol-secret")
    assert listed.returncode == 0 and subject in listed.stdout, listed.stderr
    refused = _strom_schemas_list(url)
    assert refused.returncode == 1 and "Unauthorized (error code 401)" in refused.stderr


def test_metrics_and_console_need_credentials(sasl_broker: BrokerProcess) -> None:
    url = sasl_broker.http_url
    for path in ("/metrics", "/ui/", "/subjects"):
        status, headers, body = _get(f"{url}{path}")
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith('Basic realm="Strom"')
        assert json.loads(body) == {"error_code": 401, "message": "Unauthorized"}
    status, _, body = _get(f"{url}/metrics", ("carol", "carol-secret"))
    assert status == 200 and b"kafka_server_brokertopicmetrics" in body.lower()
    status, _, body = _get(f"{url}/ui/topics", ("alice", "alice-secret"))
    assert status == 200 and b"<html" in body.lower()
    assert "HTTP authentication from 127.0.0.1 failed for 'alice'" in sasl_broker.log_path.read_text()
    assert "alice-secret" not in sasl_broker.log_path.read_text()


def test_console_login_in_chromium(sasl_broker: BrokerProcess) -> None:
    assert sasl_broker.http_url is not None
    host_port = sasl_broker.http_url.removeprefix("http://")
    with chromium() as driver:
        driver.get(f"http://alice:wrong@{host_port}/ui/topics")  # type: ignore[attr-defined]
        assert driver.find_elements(By.ID, "topics") == []  # type: ignore[attr-defined]
        driver.get(f"http://alice:alice-secret@{host_port}/ui/topics")  # type: ignore[attr-defined]
        assert driver.find_element(By.ID, "topics") is not None  # type: ignore[attr-defined]
        screenshot(driver, "login-topics")
        # The browser keeps the login for the realm: the next page needs no credentials in the URL.
        driver.get(f"http://{host_port}/ui/groups")  # type: ignore[attr-defined]
        assert "Consumer groups" in driver.title  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("http-auth-pki"))


@pytest.fixture(scope="module")
def https_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """No SASL listener, BASIC asked for explicitly, client certificates requested, ACLs on (the test's
    admin calls on PLAINTEXT are User:ANONYMOUS, a super user), /metrics public."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        "ssl.keystore.location": str(pki.broker),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.http.ssl.client.auth": "requested",
        "http.listeners": "https://127.0.0.1:0",
        "http.authentication.method": "BASIC",
        "http.metrics.public": "true",
    }
    with BrokerProcess(tmp_path_factory.mktemp("https-auth") / "data", overrides) as broker:
        _scram_user(broker, "dora", b"dora-secret")
        yield broker


def test_https_client_certificate_or_scram_login(https_broker: BrokerProcess, pki: Pki) -> None:
    url = https_broker.http_url
    assert url is not None and url.startswith("https://")
    anonymous = ssl.create_default_context(cafile=str(pki.ca))
    assert _get(f"{url}/subjects", context=anonymous)[0] == 401
    assert _get(f"{url}/subjects", ("dora", "dora-secret"), anonymous)[0] == 200
    assert _get(f"{url}/metrics", context=anonymous)[0] == 200  # http.metrics.public=true
    # Opened explicitly, /metrics asks no ACL either: dora has no Describe on the cluster.
    assert _get(f"{url}/metrics", ("dora", "dora-secret"), anonymous)[0] == 200
    assert _get(f"{url}/ui/acls", ("dora", "dora-secret"), anonymous)[0] == 403
    cert, key = pki.client(name("erin"), "erin")
    certified = ssl.create_default_context(cafile=str(pki.ca))
    certified.load_cert_chain(str(cert), str(key))
    status, _, body = _get(f"{url}/subjects", context=certified)
    assert status == 200 and json.loads(body) == []


def test_strom_schemas_trusts_a_private_ca_from_the_environment(
    https_broker: BrokerProcess, pki: Pki
) -> None:
    """A private CA's registry certificate: said so, with the setting that fixes it, then trusted."""
    url, login = str(https_broker.http_url), "dora:dora-secret"
    untrusted = _strom_schemas_list(url, STROM_SCHEMA_REGISTRY_USER_INFO=login)
    assert untrusted.returncode == 1, untrusted.stdout
    assert "does not trust" in untrusted.stderr and "$STROM_SCHEMA_REGISTRY_CA" in untrusted.stderr
    trusted = _strom_schemas_list(
        url, STROM_SCHEMA_REGISTRY_USER_INFO=login, STROM_SCHEMA_REGISTRY_CA=str(pki.ca)
    )
    assert (trusted.returncode, trusted.stderr) == (0, "")
    missing = _strom_schemas_list(url, STROM_SCHEMA_REGISTRY_CA=str(pki.ca) + ".missing")
    assert missing.returncode == 1 and "cannot read $STROM_SCHEMA_REGISTRY_CA" in missing.stderr
