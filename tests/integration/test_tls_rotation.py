"""A TLS listener's certificate rotated without a restart (KIP-226) on a real broker: confluent-kafka's
AdminClient sets ``listener.name.ssl.ssl.keystore.location`` on the broker, and the next TLS connection
is served the new certificate while clients keep working; the same file rewritten in place is re-read
when the setting is altered to the same path (Kafka's reload); DescribeConfigs shows the value's source
and synonyms; a key store on the cluster default, or one that does not load, is refused and the served
certificate stays; so is a certificate that changes the subject DN or drops a subject alternative name
(Kafka's check), while one that adds a SAN is served."""

from __future__ import annotations

import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigResource, ConfigSource, ResourceType
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.protocol.admin import IncrementalAlterConfigsRequest

from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.certs import Pki, make_pki, new_broker_keystore
from tests.integration.secure_clients import Security, roundtrip
from tests.integration.test_dynamic_broker_config import _kafka_python, _set

KEY = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    keystore = pki.directory / "served.pem"
    shutil.copy(pki.broker, keystore)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "ssl.keystore.location": str(keystore),  # broker-wide, static: the listener's synonym
        "ssl.truststore.location": str(pki.ca),
    }
    with BrokerProcess(tmp_path_factory.mktemp("rotation") / "data", overrides) as proc:
        yield proc


def served_certificate(address: str, ca: Path) -> bytes:
    """The certificate (DER) a new TLS connection to ``address`` is served."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(pem_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_file.read_text().split("-----END PRIVATE KEY-----")[1].strip())


def _alter_keystore(admin: AdminClient, path: Path) -> None:
    _set(admin, "0", listener_name_ssl_ssl_keystore_location=str(path))


def test_a_rotated_keystore_serves_new_connections(broker: BrokerProcess, pki: Pki) -> None:
    address = broker.listeners["SSL"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    first = served_certificate(address, pki.ca)
    assert first == _der(pki.broker)

    rotated = pki.directory / "rotated.pem"
    second = new_broker_keystore(pki, rotated)
    assert second != first
    _alter_keystore(admin, rotated)
    assert served_certificate(address, pki.ca) == second
    roundtrip("confluent-kafka", address, Security("SSL", ca=pki.ca))  # clients trust it (same CA)

    # The same file rewritten, then the same location set again: Kafka re-reads a modified key store.
    third = new_broker_keystore(pki, rotated)
    assert served_certificate(address, pki.ca) == second  # nothing re-read until it is altered
    _alter_keystore(admin, rotated)
    assert served_certificate(address, pki.ca) == third

    resource = ConfigResource(ResourceType.BROKER, "0")
    entry = admin.describe_configs([resource])[resource].result(30)[KEY]
    assert (entry.value, entry.source, entry.is_read_only) == (
        str(rotated),
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        False,
    )
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        found = kp.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "0", {KEY: None})],
            include_synonyms=True,
            config_filter="all",
        )["broker"]["0"][KEY]
    finally:
        kp.close()
    assert [(s["name"], s["value"], s["source"]) for s in found["synonyms"]] == [
        (KEY, str(rotated), "DYNAMIC_BROKER_CONFIG"),
        ("ssl.keystore.location", str(pki.directory / "served.pem"), "STATIC_BROKER_CONFIG"),
    ]


def test_a_keystore_that_does_not_load_or_is_cluster_wide_is_refused(broker: BrokerProcess, pki: Pki) -> None:
    address = broker.listeners["SSL"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    before = served_certificate(address, pki.ca)
    broken = pki.directory / "broken.pem"
    broken.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(KafkaException) as refused:
        _alter_keystore(admin, broken)
    assert refused.value.args[0].code() == int(ErrorCode.INVALID_CONFIG)
    assert "cannot load the key store" in refused.value.args[0].str()

    other = pki.directory / "cluster-wide.pem"
    new_broker_keystore(pki, other)
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            resource(
                resource_type=int(ConfigResourceType.BROKER),
                resource_name="",
                configs=[resource.AlterableConfig(name=KEY, config_operation=0, value=str(other))],
            )
        ],
        validate_only=False,
    )
    [result] = _kafka_python(broker.bootstrap, request).responses
    assert result.error_code == int(ErrorCode.INVALID_REQUEST)
    assert "broker id must be specified" in result.error_message
    assert served_certificate(address, pki.ca) == before


def test_a_key_password_is_not_stored_dynamically(broker: BrokerProcess) -> None:
    """The metadata store would keep it in clear: refused, as Kafka refuses one it cannot encrypt."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as refused:
        _set(admin, "0", listener_name_ssl_ssl_key_password="secret")
    assert refused.value.args[0].code() == int(ErrorCode.INVALID_CONFIG)
    assert "in clear" in refused.value.args[0].str()


def test_a_certificate_must_keep_the_subject_and_sans(broker: BrokerProcess, pki: Pki) -> None:
    address = broker.listeners["SSL"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def refused(path: Path) -> str:
        before = served_certificate(address, pki.ca)
        with pytest.raises(KafkaException) as caught:
            _alter_keystore(admin, path)
        error = caught.value.args[0]
        assert error.code() == int(ErrorCode.INVALID_CONFIG)
        assert served_certificate(address, pki.ca) == before
        return str(error.str())

    other_dn = pki.directory / "other-dn.pem"
    new_broker_keystore(pki, other_dn, common_name="broker-7")
    message = refused(other_dn)
    assert "Keystore DistinguishedName does not match" in message and "new={DN=CN=broker-7" in message
    fewer_sans = pki.directory / "fewer-sans.pem"
    new_broker_keystore(pki, fewer_sans, ip=False)
    message = refused(fewer_sans)
    assert "Keystore SubjectAltNames do not match" in message and "IP:127.0.0.1" in message

    # Same subject, the same SANs and one more: served.
    more_sans = pki.directory / "more-sans.pem"
    wider = new_broker_keystore(pki, more_sans, more_sans=("broker-0.example",))
    _alter_keystore(admin, more_sans)
    assert served_certificate(address, pki.ca) == wider
    # The served file rewritten in place with another subject: refused when re-read, as Kafka compares
    # with the certificate it loaded.
    new_broker_keystore(pki, more_sans, common_name="broker-7", more_sans=("broker-0.example",))
    assert "Keystore DistinguishedName does not match" in refused(more_sans)
    assert served_certificate(address, pki.ca) == wider


def test_an_unrelated_alteration_does_not_check_a_key_store_changed_on_disk(
    broker: BrokerProcess, pki: Pki
) -> None:
    """Only the key store settings a request alters are checked: the served key store rewritten on disk
    with another subject does not make an alteration of another config fail."""
    address = broker.listeners["SSL"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(30)
    served = Path((configs.get(KEY) or configs["ssl.keystore.location"]).value)  # dynamic, else static
    before = served_certificate(address, pki.ca)
    kept = served.read_bytes()
    new_broker_keystore(pki, served, common_name="broker-7")  # refused if it were checked
    try:
        _set(admin, "0", log_retention_ms="3600000")
        entry = admin.describe_configs([resource])[resource].result(30)["log.retention.ms"]
        assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert served_certificate(address, pki.ca) == before
    finally:
        served.write_bytes(kept)
        _set(admin, "0", AlterConfigOpType.DELETE, log_retention_ms="")
