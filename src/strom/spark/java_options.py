"""Java Kafka client settings, as Spark jobs write them, translated to librdkafka's (pure, but for reading
the trust and key stores they name).

Spark's Kafka connector hands `kafka.*` options to the Java client; Strom hands them to librdkafka, which
refuses the Java-only names. `translate` rewrites the ones with a librdkafka counterpart, so a job keeps
its security settings when it moves from format `kafka` to `strom`:

* `sasl.jaas.config` with `PlainLoginModule` or `ScramLoginModule` (`username="..." password="..."`)
  becomes `sasl.username` / `sasl.password`; the mechanism is `sasl.mechanism` (PLAIN by default for the
  PLAIN module; the SCRAM module needs `SCRAM-SHA-256` or `SCRAM-SHA-512`, as in Java). Other login
  modules (Kerberos, OAuth) are refused, naming librdkafka's own options.
* `ssl.truststore.location` (with `ssl.truststore.type`, `ssl.truststore.password`) becomes `ssl.ca.pem`:
  the store is read on the driver -- a PKCS#12 store with `cryptography` (trusted certificates and any
  other certificate it holds), a PEM file as it is -- and its certificates travel inline to the
  executors. JKS stores are refused with the `keytool` command that converts them: no well-kept PyPI
  library reads JKS (pyjks has not been released since 2020), and Java reads the PKCS#12 store as well.
  `ssl.truststore.certificates` (inline PEM) becomes `ssl.ca.pem`.
* `ssl.keystore.location` of type PKCS12 is librdkafka's own `ssl.keystore.location` (PKCS#12) with
  `ssl.keystore.password`; a PEM keystore (key and chain in one file) becomes `ssl.certificate.location`
  and `ssl.key.location`; inline `ssl.keystore.key` / `ssl.keystore.certificate.chain` become
  `ssl.key.pem` / `ssl.certificate.pem`; `ssl.key.password` is the key's passphrase in both clients.
* `ssl.endpoint.identification.algorithm` empty (Java's "off") becomes `none`.
* `partitioner.class`: Java's default partitioner (or `BuiltInPartitioner`) becomes `murmur2_random`
  (the same placement of keyed records), `UniformStickyPartitioner` becomes `random`; other classes are
  refused (Java code cannot run in librdkafka).
* `group.id` is the source's progress group, not a client setting (`progress`).
* Java-only knobs with no effect here (`ssl.truststore.type`, `ssl.keystore.type`, `ssl.protocol`,
  `ssl.enabled.protocols`, `sasl.login.class`, ...) are dropped with a warning.

Every rewrite is reported in the returned notes, which the source logs as warnings.
"""

from __future__ import annotations

import re
from pathlib import Path

from strom.spark.errors import KafkaOptionError

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_JAAS = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*(.*?);?\s*$", re.DOTALL)
_JAAS_OPTION = re.compile(r"""([\w.]+)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s;]+)""")
_JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "murmur2_random",
    "org.apache.kafka.clients.producer.internals.BuiltInPartitioner": "murmur2_random",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": "random",
}
_DROPPED = (
    "ssl.truststore.type",
    "ssl.keystore.type",
    "ssl.truststore.password",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "ssl.provider",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "sasl.login.class",
    "sasl.client.callback.handler.class",
)
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module, options) of a one-module JAAS configuration as Kafka's `sasl.jaas.config` holds.

    Raises:
        KafkaOptionError: not of the form `<module> <flag> key="value" ...;`.
    """
    match = _JAAS.fullmatch(text.strip())
    if match is None:
        raise KafkaOptionError(
            "Kafka option 'sasl.jaas.config' must be '<LoginModule> required key=\"value\" ...;', "
            f"got {text.strip()[:60]!r}"
        )
    options = {}
    for key, raw in _JAAS_OPTION.findall(match.group(3)):
        value = raw[1:-1] if raw[:1] in ("'", '"') else raw
        options[key] = re.sub(r"\\(.)", r"\1", value)
    return match.group(1), options


def _sasl(config: dict[str, str], notes: list[str]) -> None:
    jaas = config.pop("sasl.jaas.config", None)
    if jaas is None:
        return
    module, options = parse_jaas(jaas)
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if module == _PLAIN_MODULE:
        mechanism = mechanism or "PLAIN"
        if mechanism.upper() != "PLAIN":
            raise KafkaOptionError(
                f"sasl.jaas.config uses PlainLoginModule but sasl.mechanism is {mechanism}"
            )
    elif module == _SCRAM_MODULE:
        if not mechanism or mechanism.upper() not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise KafkaOptionError(
                "sasl.jaas.config uses ScramLoginModule: set kafka.sasl.mechanism to SCRAM-SHA-256 or "
                "SCRAM-SHA-512"
            )
    else:
        raise KafkaOptionError(
            f"sasl.jaas.config login module {module} has no librdkafka translation: set librdkafka's own "
            "options instead (kafka.sasl.kerberos.* for GSSAPI, kafka.sasl.oauthbearer.* for OAUTHBEARER)"
        )
    if "username" not in options or "password" not in options:
        raise KafkaOptionError('sasl.jaas.config needs username="..." and password="..."')
    config.pop("sasl.mechanisms", None)
    config["sasl.mechanism"] = mechanism.upper()
    config["sasl.username"] = options["username"]
    config["sasl.password"] = options["password"]
    notes.append(f"sasl.jaas.config ({module.rsplit('.', 1)[-1]}) -> sasl.username/sasl.password")


def _pem_of_pkcs12(data: bytes, password: str | None, what: str) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise KafkaOptionError(f"{what}: cannot read it as PKCS#12 (wrong password?): {e}") from e
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.insert(0, store.cert.certificate)
    if not certificates:
        raise KafkaOptionError(f"{what}: the PKCS#12 store holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in certificates)


def _store_kind(path: str, declared: str | None, what: str) -> tuple[str, bytes]:
    """(PEM, PKCS12 or JKS, the file's bytes): by content, as Java also reads PKCS#12 under type JKS."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise KafkaOptionError(f"kafka.{what} {path!r} cannot be read: {e}") from e
    if data[:4] in _JKS_MAGIC:
        return "JKS", data
    if b"-----BEGIN" in data[:4096]:
        return "PEM", data
    if declared and declared.upper() == "PEM":
        return "PEM", data
    return "PKCS12", data


def _jks_refused(path: str, what: str, store_password: str | None) -> KafkaOptionError:
    target = str(Path(path).with_suffix(".p12"))
    return KafkaOptionError(
        f"kafka.{what} {path!r} is a JKS store, which librdkafka cannot read. Convert it once with "
        f"`keytool -importkeystore -srckeystore {path} -destkeystore {target} -deststoretype PKCS12"
        f"{' -srcstorepass ... -deststorepass ...' if store_password else ''}` and point kafka.{what} at "
        f"{target} (Java's Kafka client reads PKCS#12 too), or give PEM files (kafka.ssl.ca.location, "
        "kafka.ssl.certificate.location, kafka.ssl.key.location)"
    )


def _ssl(config: dict[str, str], notes: list[str]) -> None:
    inline = config.pop("ssl.truststore.certificates", None)
    if inline is not None:
        config["ssl.ca.pem"] = inline
        notes.append("ssl.truststore.certificates -> ssl.ca.pem")
    location = config.pop("ssl.truststore.location", None)
    if location:
        password = config.get("ssl.truststore.password")
        kind, data = _store_kind(location, config.get("ssl.truststore.type"), "ssl.truststore.location")
        if kind == "JKS":
            raise _jks_refused(location, "ssl.truststore.location", password)
        if kind == "PEM":
            config["ssl.ca.location"] = location
        else:
            config["ssl.ca.pem"] = _pem_of_pkcs12(
                data, password, f"kafka.ssl.truststore.location {location!r}"
            )
        notes.append(
            f"ssl.truststore.location ({kind}) -> {'ssl.ca.location' if kind == 'PEM' else 'ssl.ca.pem'}"
        )
    keystore = config.get("ssl.keystore.location")
    if keystore:
        kind, _ = _store_kind(keystore, config.get("ssl.keystore.type"), "ssl.keystore.location")
        if kind == "JKS":
            raise _jks_refused(keystore, "ssl.keystore.location", config.get("ssl.keystore.password"))
        if kind == "PEM":
            del config["ssl.keystore.location"]
            config["ssl.certificate.location"] = keystore
            config["ssl.key.location"] = keystore
            notes.append("ssl.keystore.location (PEM) -> ssl.certificate.location/ssl.key.location")
    for java, rdkafka in (
        ("ssl.keystore.key", "ssl.key.pem"),
        ("ssl.keystore.certificate.chain", "ssl.certificate.pem"),
    ):
        if java in config:
            config[rdkafka] = config.pop(java)
            notes.append(f"{java} -> {rdkafka}")
    if config.get("ssl.endpoint.identification.algorithm") == "":
        config["ssl.endpoint.identification.algorithm"] = "none"
        notes.append("ssl.endpoint.identification.algorithm '' -> none")


def _partitioner(config: dict[str, str], notes: list[str]) -> None:
    java = config.pop("partitioner.class", None)
    if java is None:
        return
    found = _JAVA_PARTITIONERS.get(java.strip())
    if found is None:
        raise KafkaOptionError(
            f"Kafka option 'partitioner.class' {java!r}: Java partitioners cannot run in librdkafka. Use "
            "kafka.partitioner (murmur2_random: Java's default placement; random, consistent_random, "
            "fnv1a_random, ...) or set the partition column"
        )
    config.setdefault("partitioner", found)
    notes.append(f"partitioner.class {java.rsplit('.', 1)[-1]} -> partitioner={config['partitioner']}")


def translate(config: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The librdkafka configuration for Java-style `kafka.*` settings, and notes of what was rewritten.

    Raises:
        KafkaOptionError: a setting with no librdkafka counterpart (naming what to use instead), or a
            store that cannot be read.
    """
    out = dict(config)
    notes: list[str] = []
    _sasl(out, notes)
    _ssl(out, notes)
    _partitioner(out, notes)
    for key in _DROPPED:
        if out.pop(key, None) is not None:
            notes.append(f"{key} dropped (no librdkafka counterpart needed)")
    return out, notes
