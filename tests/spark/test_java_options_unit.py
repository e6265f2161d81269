"""Java Kafka client settings translated to librdkafka's: JAAS modules, trust and key stores (PKCS#12,
PEM, JKS refused with the fix), the Java partitioner, ignored options (pure; stores made with
`cryptography` as keytool would make them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, Encoding, pkcs12

from strom.spark.java_options import parse_jaas, translate
from strom.spark.options import KafkaOptionError, parse_sink_options, parse_source_options
from tests.integration.certs import Pki, make_pki, name

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
SCRAM = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="carol" password="p\\"w;d";'
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_jaas_plain_and_scram() -> None:
    module, options = parse_jaas(SCRAM)
    assert module.endswith("ScramLoginModule") and options == {"username": "carol", "password": 'p"w;d'}
    config, notes = translate({"sasl.jaas.config": SCRAM, "sasl.mechanism": "SCRAM-SHA-512"})
    assert config == {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": 'p"w;d'}
    assert notes == ["sasl.jaas.config (ScramLoginModule) -> sasl.username/sasl.password"]
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required username='alice' password='s';"
    config, _ = translate({"sasl.jaas.config": plain, "security.protocol": "SASL_SSL"})
    assert config["sasl.mechanism"] == "PLAIN" and config["sasl.username"] == "alice"
    # librdkafka accepts what came out.
    Producer({"bootstrap.servers": "127.0.0.1:1", **config})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"sasl.jaas.config": SCRAM}, "set kafka.sasl.mechanism to SCRAM-SHA-256"),
        ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "kerberos"),
        ({"sasl.jaas.config": "username=x"}, "must be '<LoginModule> required"),
        ({"partitioner.class": "com.example.MyPartitioner"}, "Java partitioners cannot run in librdkafka"),
        ({"ssl.truststore.location": "/nonexistent/ts.jks"}, "cannot be read"),
    ],
)
def test_untranslatable_settings_name_the_fix(config: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaOptionError, match=message):
        translate(config)


def test_pkcs12_truststore_becomes_inline_pem_and_keystore_passes(pki: Pki, tmp_path: Path) -> None:
    from cryptography import x509

    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    truststore = tmp_path / "truststore.p12"
    truststore.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca, b"ca")], BestAvailableEncryption(b"changeit")
        )
    )
    config, notes = translate(
        {
            "ssl.truststore.location": str(truststore),
            "ssl.truststore.password": "changeit",
            "ssl.truststore.type": "PKCS12",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert config == {
        "ssl.ca.pem": ca.public_bytes(Encoding.PEM).decode(),
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert "ssl.truststore.location (PKCS12) -> ssl.ca.pem" in notes
    with pytest.raises(KafkaOptionError, match="wrong password"):
        translate({"ssl.truststore.location": str(truststore), "ssl.truststore.password": "nope"})
    cert, key = pki.client(name("spark"), "spark")
    pem_store = tmp_path / "keystore.pem"
    pem_store.write_bytes(key.read_bytes() + cert.read_bytes())
    config, _ = translate({"ssl.keystore.location": str(pem_store), "ssl.keystore.type": "PEM"})
    assert config == {"ssl.certificate.location": str(pem_store), "ssl.key.location": str(pem_store)}
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    p12 = tmp_path / "keystore.p12"
    p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"spark",
            load_pem_private_key(key.read_bytes(), None),  # type: ignore[arg-type]
            x509.load_pem_x509_certificate(cert.read_bytes()),
            None,
            BestAvailableEncryption(b"secret"),
        )
    )
    keystore = {
        "ssl.keystore.location": str(p12),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": "secret",
    }
    config, _ = translate(keystore)
    assert config == {"ssl.keystore.location": str(p12), "ssl.keystore.password": "secret"}
    # librdkafka loads both stores as translated.
    translated, _ = translate(
        {**keystore, "ssl.truststore.location": str(truststore), "ssl.truststore.password": "changeit"}
    )
    Producer({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL", **translated})


def test_jks_store_is_refused_with_the_keytool_command(tmp_path: Path) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 64)
    with pytest.raises(KafkaOptionError, match=r"keytool -importkeystore -srckeystore .*truststore\.jks"):
        translate({"ssl.truststore.location": str(jks)})


def test_java_partitioner_and_ignored_options() -> None:
    sink = parse_sink_options(
        {
            "kafka.bootstrap.servers": "b:9092",
            "topic": "t",
            "kafka.partitioner.class": "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
        }
    )
    assert (
        sink.client_config["partitioner"] == "murmur2_random"
        and "partitioner.class" not in sink.client_config
    )
    # Streaming: the group the query's progress is committed to; batch: ignored, with a warning.
    stream = parse_source_options({**BASE, "kafka.group.id": "g", "groupIdPrefix": "p"}, streaming=True)
    assert (stream.publish_progress, stream.progress_group, stream.progress_group_prefix) == (True, "g", "p")
    assert "group.id" not in stream.client_config and not [n for n in stream.notes if "ignored" in n]
    source = parse_source_options({**BASE, "kafka.group.id": "g", "groupIdPrefix": "p"}, streaming=False)
    assert "group.id" not in source.client_config and not source.publish_progress
    assert [n for n in source.notes if "ignored" in n] == [
        "kafka.group.id is ignored: the source reads without a consumer group",
        "groupIdPrefix is ignored: the source reads without a consumer group",
    ]
    off = parse_source_options({**BASE, "commitProgressToGroup": "false"}, streaming=True)
    assert not off.publish_progress
    with pytest.raises(KafkaOptionError, match="commitProgressToGroup"):
        parse_source_options({**BASE, "commitProgressToGroup": "maybe"}, streaming=True)
    assert source.fetch_offset_retry_interval_ms == 10  # Spark's default
