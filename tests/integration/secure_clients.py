"""Produce-then-consume round trips with each real client over a secured listener.

`Security` says how to connect (Kafka's protocol name, CA file, optional client certificate, SASL
mechanism and credentials); each function translates it into its library's own settings and raises if
the records do not come back.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")


@dataclass(frozen=True)
class Security:
    protocol: str  # SSL, SASL_PLAINTEXT, SASL_SSL
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None


def librdkafka_settings(sec: Security) -> dict[str, str]:
    out = {"security.protocol": sec.protocol}
    if sec.ca:
        out["ssl.ca.location"] = str(sec.ca)
    if sec.cert and sec.key:
        out["ssl.certificate.location"] = str(sec.cert)
        out["ssl.key.location"] = str(sec.key)
    if sec.mechanism:
        out["sasl.mechanisms"] = sec.mechanism
        out["sasl.username"] = sec.username or ""
        out["sasl.password"] = sec.password or ""
    return out


def _python_settings(sec: Security, aio: bool) -> dict[str, Any]:
    import ssl

    out: dict[str, Any] = {"security_protocol": sec.protocol}
    if sec.ca:
        ctx = ssl.create_default_context(cafile=str(sec.ca))
        if sec.cert and sec.key:
            ctx.load_cert_chain(str(sec.cert), str(sec.key))
        out["ssl_context"] = ctx
    if sec.mechanism:
        out["sasl_mechanism"] = sec.mechanism
        out["sasl_plain_username"] = sec.username
        out["sasl_plain_password"] = sec.password
    return out


def roundtrip(client: str, bootstrap: str, sec: Security, count: int = 5, value_size: int = 100) -> None:
    topic = f"sec-{client}-{uuid.uuid4().hex[:8]}"
    values = [f"{i:06d}".encode() * (value_size // 6 + 1) for i in range(count)]
    if client == "confluent-kafka":
        _confluent(bootstrap, sec, topic, values)
    elif client == "kafka-python":
        _kafka_python(bootstrap, sec, topic, values)
    elif client == "aiokafka":
        asyncio.run(_aiokafka(bootstrap, sec, topic, values))
    elif client == "kcat":
        _kcat(bootstrap, sec, topic, values)
    else:
        raise ValueError(client)


def _confluent(bootstrap: str, sec: Security, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer

    base = {"bootstrap.servers": bootstrap, **librdkafka_settings(sec)}
    errors: list[Any] = []
    producer = Producer({**base, "error_cb": errors.append, "message.timeout.ms": 20000})
    for value in values:
        producer.produce(topic, value)
    if producer.flush(25) != 0:
        raise AssertionError(f"confluent-kafka: not delivered ({errors[:3]})")
    consumer = Consumer({**base, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    assert got == values, f"confluent-kafka consumed {len(got)} of {len(values)}"


def _kafka_python(bootstrap: str, sec: Security, topic: str, values: list[bytes]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    settings = _python_settings(sec, aio=False)
    producer = KafkaProducer(bootstrap_servers=bootstrap, **settings)
    for value in values:
        producer.send(topic, value)
    producer.flush(25)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **settings,
    )
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == len(values):
            break
    consumer.close()
    assert got == values, f"kafka-python consumed {len(got)} of {len(values)}"


async def _aiokafka(bootstrap: str, sec: Security, topic: str, values: list[bytes]) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    settings = _python_settings(sec, aio=True)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **settings)
    await consumer.start()
    got: list[bytes] = []
    try:
        async with asyncio.timeout(20):
            async for msg in consumer:
                assert msg.value is not None
                got.append(msg.value)
                if len(got) == len(values):
                    break
    finally:
        await consumer.stop()
    assert got == values, f"aiokafka consumed {len(got)} of {len(values)}"


def kcat_args(bootstrap: str, sec: Security) -> list[str]:
    args = ["kcat", "-b", bootstrap]
    for key, value in librdkafka_settings(sec).items():
        args += ["-X", f"{key}={value}"]
    return args


def _kcat(bootstrap: str, sec: Security, topic: str, values: list[bytes]) -> None:
    base = kcat_args(bootstrap, sec)
    produced = subprocess.run(
        [*base, "-P", "-t", topic],
        input=b"\n".join(values) + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    consumed = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-c", str(len(values)), "-e"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
    assert consumed.stdout.split(b"\n")[: len(values)] == values
