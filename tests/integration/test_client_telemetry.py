"""Client telemetry (KIP-714) on a real broker over TCP: a client-metrics subscription set with
IncrementalAlterConfigs (resource type 16) and described; a confluent-kafka producer (librdkafka pushes
when the broker advertises GetTelemetrySubscriptions) pushes the metrics it asks for, which ``/metrics``
then shows under the producer's client id; and the two APIs at the wire, with an OpenTelemetry payload
built here: a new instance id, the subscription, a push refused for another subscription id, too
early, or unreadable, and one accepted; subscriptions selecting on the client's software (ApiVersions v3)
and its source port."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.uuid_text import uuid_text
from strom.testing import BrokerProcess
from strom.testing.metrics import scrape
from tests.integration.rawclient import RawClient
from tests.integration.test_dynamic_broker_config import _kafka_python

CLIENT_METRICS = 16


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("telemetry") / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _subscribe(bootstrap: str, name: str, **configs: str) -> None:
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            resource(
                resource_type=CLIENT_METRICS,
                resource_name=name,
                configs=[
                    resource.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v)
                    for k, v in configs.items()
                ],
            )
        ],
        validate_only=False,
    )
    [result] = _kafka_python(bootstrap, request).responses
    assert result.error_code == 0, result


def _described(bootstrap: str, name: str) -> dict[str, tuple[str, int]]:
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None
            )
        ],
        include_synonyms=False,
    )
    [result] = _kafka_python(bootstrap, request).results
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_a_subscription_is_set_described_and_checked(broker: BrokerProcess) -> None:
    name = f"sub-{uuid.uuid4().hex[:6]}"
    # Matching no client of this module's other tests.
    _subscribe(
        broker.bootstrap,
        name,
        metrics="org.apache.kafka.consumer.",
        interval_ms="60000",
        match="client_id=nobody",
    )
    assert _described(broker.bootstrap, name) == {
        "metrics": ("org.apache.kafka.consumer.", 7),  # CLIENT_METRICS_CONFIG
        "interval.ms": ("60000", 7),
        "match": ("client_id=nobody", 7),
    }
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    bad = IncrementalAlterConfigsRequest(
        resources=[
            resource(
                resource_type=CLIENT_METRICS,
                resource_name=name,
                configs=[resource.AlterableConfig(name="interval.ms", config_operation=0, value="10")],
            )
        ],
        validate_only=False,
    )
    [refused] = _kafka_python(broker.bootstrap, bad).responses
    assert refused.error_code == int(ErrorCode.INVALID_CONFIG)


def _metrics_data(*metrics: Metric) -> bytes:
    data = MetricsData(
        resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=list(metrics))])]
    )
    return data.SerializeToString()


def _point(value: float, **attributes: str) -> NumberDataPoint:
    return NumberDataPoint(
        as_double=value,
        attributes=[KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items()],
    )


# Long enough that two pushes sent back to back fall inside it on a loaded machine.
PUSH_INTERVAL_MS = 2000


def test_the_two_apis_at_the_wire(broker: BrokerProcess) -> None:
    client_id = f"raw-{uuid.uuid4().hex[:6]}"
    _subscribe(
        broker.bootstrap,
        f"raw-{client_id}",
        metrics="strom.test.",
        interval_ms=str(PUSH_INTERVAL_MS),
        match=f"client_id={client_id}",
    )
    assert broker.http_url is not None
    with RawClient(broker.bootstrap, client_id=client_id) as raw:
        got: Any = raw.call(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"client_instance_id": bytes(16)})
        assert got["error_code"] == 0 and got["client_instance_id"] != bytes(16)
        assert (got["requested_metrics"], got["push_interval_ms"]) == (["strom.test."], PUSH_INTERVAL_MS)
        assert got["accepted_compression_types"] == [4, 3, 1, 2] and got["delta_temporality"] is True
        instance, subscription = got["client_instance_id"], got["subscription_id"]

        def push(payload: bytes, subscription_id: int = subscription, compression: int = 0) -> int:
            body = {
                "client_instance_id": instance,
                "subscription_id": subscription_id,
                "terminating": False,
                "compression_type": compression,
                "metrics": payload,
            }
            answer: Any = raw.call(ApiKey.PUSH_TELEMETRY, 0, body)
            return int(answer["error_code"])

        payload = _metrics_data(
            Metric(name="strom.test.queue.depth", gauge=Gauge(data_points=[_point(7.0, topic="t1")])),
            Metric(
                name="strom.test.sent",
                sum=Sum(
                    data_points=[_point(5.0)],
                    aggregation_temporality=AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA,
                    is_monotonic=True,
                ),
            ),
            Metric(name="other.metric", gauge=Gauge(data_points=[_point(1.0)])),  # not subscribed
        )
        assert push(payload, subscription_id=subscription ^ 1) == int(ErrorCode.UNKNOWN_SUBSCRIPTION_ID)
        time.sleep(PUSH_INTERVAL_MS / 1000 + 0.1)
        assert push(payload) == 0
        assert push(payload) == int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)  # before the interval
        time.sleep(PUSH_INTERVAL_MS / 1000 + 0.1)
        assert push(payload) == 0  # the delta sum adds up: 10
        time.sleep(PUSH_INTERVAL_MS / 1000 + 0.1)
        assert push(b"\x0a\xff\xff") == int(ErrorCode.INVALID_RECORD)
    instance_text = uuid_text(bytes(instance))  # Kafka's text form of a Uuid
    seen = scrape(broker.http_url)
    labels = (("client_id", client_id), ("client_instance_id", instance_text))
    assert seen["strom_test_queue_depth"][(*labels, ("topic", "t1"))] == 7.0
    assert seen["strom_test_sent"][labels] == 10.0
    assert "other_metric" not in seen


def test_selectors_on_the_client_software_and_source_port(broker: BrokerProcess) -> None:
    tag = uuid.uuid4().hex[:6]
    software = f"strom-selector-{tag}"
    with RawClient(broker.bootstrap, client_id=f"sel-{tag}") as raw, RawClient(broker.bootstrap) as other:
        port = raw.sock.getsockname()[1]
        subscriptions = {
            "port": f"client_software_name={software},client_source_port={port}",
            "other-port": f"client_software_name={software},client_source_port={port + 1}",
            "version": f"client_software_version=9\\.9-{tag}",
            "unknown": f"client_software_name=unknown,client_id=sel-{tag}",
        }
        for key, match in subscriptions.items():
            _subscribe(broker.bootstrap, f"sel-{key}-{tag}", metrics=f"{key}.", match=match)
        named = {"client_software_name": software, "client_software_version": f"9.9-{tag}"}
        versions: Any = raw.call(ApiKey.API_VERSIONS, 3, named)
        assert versions["error_code"] == 0
        got: Any = raw.call(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"client_instance_id": bytes(16)})
        assert got["error_code"] == 0 and got["requested_metrics"] == ["port.", "version."]
        # A connection that named no software is "unknown", as in Kafka.
        with RawClient(broker.bootstrap, client_id=f"sel-{tag}") as nameless:
            got = nameless.call(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"client_instance_id": bytes(16)})
            assert got["requested_metrics"] == ["unknown."]
        got = other.call(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, {"client_instance_id": bytes(16)})
        assert got["requested_metrics"] == []


def test_librdkafka_pushes_its_metrics(broker: BrokerProcess) -> None:
    client_id = f"pusher-{uuid.uuid4().hex[:6]}"
    # Selected by what librdkafka tells of itself too: confluent-kafka's ApiVersions v3 software name.
    _subscribe(
        broker.bootstrap,
        f"producers-{client_id}",
        metrics="org.apache.kafka.producer.",
        interval_ms="1000",
        match=f"client_id={client_id},client_software_name=confluent-kafka-python,client_source_port=[0-9]+",
    )
    assert broker.http_url is not None
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "client.id": client_id, "enable.metrics.push": True}
    )
    topic = f"telemetry-{uuid.uuid4().hex[:6]}"
    found: dict[str, float] = {}
    deadline = time.monotonic() + 30
    try:
        while not found and time.monotonic() < deadline:
            for _ in range(50):
                producer.produce(topic, b"x" * 100)
            producer.flush(10)
            seen = scrape(broker.http_url)
            found = {
                name: value
                for name, series in seen.items()
                if name.startswith("org_apache_kafka_producer_")
                for labels, value in series.items()
                if ("client_id", client_id) in labels
            }
            time.sleep(0.5)
    finally:
        producer.flush(10)
    assert found, "no producer metric pushed"
    assert all(name.startswith("org_apache_kafka_producer_") for name in found)
