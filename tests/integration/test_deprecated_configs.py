"""Deprecated topic configs that Kafka 3.x still accepts, through confluent-kafka's AdminClient.

``message.format.version`` and ``message.downconversion.enable`` are accepted (and have no effect);
``message.timestamp.difference.max.ms`` is accepted and, as in Kafka 3.6+, bounds CreateTime
timestamps when the newer before/after settings are not given. CreateTopics, AlterConfigs and
IncrementalAlterConfigs all take them; DescribeConfigs shows them as topic overrides.
"""

from __future__ import annotations

import itertools
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from strom.testing import BrokerProcess

_names = itertools.count()


def describe(admin: AdminClient, topic: str) -> dict[str, tuple[str, bool]]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=20)
    return {name: (e.value, e.is_default) for name, e in entries.items()}


def test_create_and_alter_with_deprecated_names(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"deprecated-{next(_names)}"
    new = NewTopic(
        topic, 1, 1, config={"message.format.version": "2.8", "message.downconversion.enable": "false"}
    )
    admin.create_topics([new])[topic].result(timeout=20)
    described = describe(admin, topic)
    assert described["message.format.version"] == ("2.8", False)
    assert described["message.downconversion.enable"] == ("false", False)

    old = f"deprecated-{next(_names)}"  # a 0.x release in four parts, read by its first three as Kafka does
    admin.create_topics([NewTopic(old, 1, 1, config={"message.format.version": "0.10.0.0"})])[old].result(20)
    assert describe(admin, old)["message.format.version"] == ("0.10.0.0", False)

    legacy = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"message.format.version": "0.10.2"})
    with pytest.warns(DeprecationWarning):  # the client's legacy API (AlterConfigs), still in use
        futures = admin.alter_configs([legacy])
    futures[legacy].result(timeout=20)
    assert describe(admin, topic)["message.format.version"] == ("0.10.2", False)

    incremental = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("message.format.version", "3.0-IV1", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "message.timestamp.difference.max.ms", "60000", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    admin.incremental_alter_configs([incremental])[incremental].result(timeout=20)
    described = describe(admin, topic)
    assert described["message.format.version"] == ("3.0-IV1", False)
    assert described["message.timestamp.difference.max.ms"] == ("60000", False)
    assert described["message.timestamp.before.max.ms"][0] == "60000"

    # the deprecated bound is honoured: a record two hours old is refused, a current one accepted
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    now_ms = int(time.time() * 1000)
    for ts in (now_ms - 7_200_000, now_ms):
        producer.produce(topic, value=b"v", timestamp=ts, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(20) == 0
    assert errors[0] is not None and errors[0].name() == "INVALID_TIMESTAMP"
    assert errors[1] is None


def test_bad_values_and_unknown_names_are_still_refused(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for config in ({"message.format.version": "newest"}, {"message.format.versions": "2.8"}):
        topic = f"deprecated-bad-{next(_names)}"
        try:
            admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=20)
        except KafkaException as exc:
            assert exc.args[0].name() == "INVALID_CONFIG"
        else:
            raise AssertionError(f"{config} was accepted")
