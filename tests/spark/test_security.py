"""Spark jobs against secured listeners with Java-client security settings, as Spark's Kafka connector
takes them: SASL_SSL with `kafka.sasl.jaas.config` (SCRAM and PLAIN modules) and a PKCS#12 trust store,
and mutual TLS with PKCS#12 key and trust stores; the Java partitioner class on the sink."""

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
from cryptography import x509
from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12

from strom.spark.partitioner import partition_for_key
from strom.testing.broker_process import BrokerProcess
from tests.integration.certs import Pki, make_pki, name
from tests.spark.kafka_helpers import consume_all, new_topic, produce

pytestmark = pytest.mark.spark

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
STORE_PASSWORD = "changeit"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def stores(pki: Pki) -> tuple[Path, Path]:
    """(trust store, client key store), PKCS#12 as keytool makes them, for the CN=spark client."""
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    truststore = pki.directory / "truststore.p12"
    truststore.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca, b"ca")], BestAvailableEncryption(STORE_PASSWORD.encode())
        )
    )
    cert, key = pki.client(name("spark"), "spark")
    keystore = pki.directory / "spark.p12"
    keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"spark",
            load_pem_private_key(key.read_bytes(), None),  # type: ignore[arg-type]
            x509.load_pem_x509_certificate(cert.read_bytes()),
            [ca],
            BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    return truststore, keystore


@pytest.fixture(scope="module")
def secure_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(pki.broker),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(tmp_path_factory.mktemp("secure") / "data", overrides) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        upsert = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-secret"
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
        yield broker


def truststore_options(truststore: Path) -> dict[str, str]:
    return {
        "kafka.ssl.truststore.location": str(truststore),
        "kafka.ssl.truststore.password": STORE_PASSWORD,
        "kafka.ssl.truststore.type": "PKCS12",
    }


def check_read_and_write(
    spark: Any, broker: BrokerProcess, read: dict[str, str], write: dict[str, str]
) -> None:
    """A batch read of a topic and a keyed batch write to another, both through the secured listener;
    checked from the PLAINTEXT one."""
    source, sink = new_topic(broker.bootstrap, partitions=2), new_topic(broker.bootstrap, partitions=3)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(30)]
    produce(broker.bootstrap, source, records)
    df = spark.read.format("strom").option("subscribe", source).options(**read).load()
    assert sorted((bytes(r.key), bytes(r.value)) for r in df.collect()) == sorted(records)
    (
        df.select("key", "value")
        .write.format("strom")
        .option("topic", sink)
        .options(**write)
        .mode("append")
        .save()
    )
    written = consume_all(broker.bootstrap, sink, 3)
    assert sorted((r["key"], r["value"]) for r in written) == sorted(records)
    # The Java default partitioner's placement (murmur2), as Spark's Kafka sink would place them.
    assert all(r["partition"] == partition_for_key(r["key"], 3) for r in written)


def test_sasl_ssl_with_jaas_config_and_pkcs12_truststore(
    spark: Any, secure_broker: BrokerProcess, stores: tuple[Path, Path]
) -> None:
    truststore, _ = stores
    address = secure_broker.listeners["SASL_SSL"]
    scram = {
        "kafka.bootstrap.servers": address,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="carol" password="carol-secret";',
        **truststore_options(truststore),
    }
    plain = {
        "kafka.bootstrap.servers": address,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";',
        "kafka.partitioner.class": "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
        **truststore_options(truststore),
    }
    check_read_and_write(spark, secure_broker, scram, plain)


def test_mutual_tls_with_pkcs12_key_and_trust_stores(
    spark: Any, secure_broker: BrokerProcess, stores: tuple[Path, Path]
) -> None:
    truststore, keystore = stores
    mtls = {
        "kafka.bootstrap.servers": secure_broker.listeners["MTLS"],
        "kafka.security.protocol": "SSL",
        "kafka.ssl.keystore.location": str(keystore),
        "kafka.ssl.keystore.password": STORE_PASSWORD,
        "kafka.ssl.keystore.type": "PKCS12",
        "kafka.ssl.key.password": STORE_PASSWORD,
        **truststore_options(truststore),
    }
    check_read_and_write(spark, secure_broker, mtls, mtls)
