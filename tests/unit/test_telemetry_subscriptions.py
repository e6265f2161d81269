"""Client-metrics subscriptions (strom.telemetry.subscriptions, KIP-714): configs checked as Kafka checks
them, the instance a client gets from the subscriptions it matches, and the throttling of its requests."""

from __future__ import annotations

import itertools

import pytest

from strom.protocol.errors import ErrorCode, KafkaError
from strom.telemetry.subscriptions import ALL_METRICS, Subscriptions, parse_subscription

THROTTLED = int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)


def _ids() -> itertools.count[int]:
    return itertools.count(1)


def _subscriptions() -> Subscriptions:
    counter = _ids()
    return Subscriptions(lambda: next(counter).to_bytes(16, "big"))


@pytest.mark.parametrize(
    ("configs", "code"),
    [
        ({"interval.ms": "99"}, ErrorCode.INVALID_CONFIG),
        ({"interval.ms": "3600001"}, ErrorCode.INVALID_CONFIG),
        ({"interval.ms": "soon"}, ErrorCode.INVALID_CONFIG),
        ({"match": "client_colour=red"}, ErrorCode.INVALID_CONFIG),
        ({"match": "client_id=(unclosed"}, ErrorCode.INVALID_CONFIG),
        ({"metrix": "x"}, ErrorCode.INVALID_REQUEST),
    ],
)
def test_bad_configs_are_refused(configs: dict[str, str], code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as refused:
        parse_subscription("s", configs)
    assert refused.value.code == code


def test_a_client_gets_the_union_of_the_subscriptions_it_matches() -> None:
    subscriptions = _subscriptions()
    subscriptions.replace(
        {
            "apps": {
                "metrics": "org.apache.kafka.producer.",
                "interval.ms": "2000",
                "match": "client_id=app-.*",
            },
            "latency": {"metrics": "org.apache.kafka.consumer.fetch", "interval.ms": "5000"},
            "others": {"metrics": "*", "match": "client_id=other"},
        }
    )
    app, error = subscriptions.get(bytes(16), {"client_id": "app-1"}, 10_000)
    assert error == 0 and app.instance_id == (1).to_bytes(16, "big")  # a new instance id
    assert app.metrics == ("org.apache.kafka.consumer.fetch", "org.apache.kafka.producer.")
    assert app.push_interval_ms == 2000
    other, _ = subscriptions.get(bytes(16), {"client_id": "other"}, 10_000)
    assert other.metrics == (ALL_METRICS,)
    nobody, _ = subscriptions.get(bytes(16), {"client_id": "x"}, 10_000)
    assert nobody.metrics == ("org.apache.kafka.consumer.fetch",) and nobody.push_interval_ms == 5000
    assert len({app.subscription_id, other.subscription_id, nobody.subscription_id}) == 3


def test_requests_are_throttled_to_the_push_interval_and_a_change_is_seen() -> None:
    subscriptions = _subscriptions()
    subscriptions.replace({"all": {"metrics": "*", "interval.ms": "1000"}})
    instance, _ = subscriptions.get(bytes(16), {"client_id": "c"}, 10_000)
    iid, sid = instance.instance_id, instance.subscription_id

    def push(now: int, subscription: int = sid, size: int = 10, compression: int = 0) -> int:
        return subscriptions.push(iid, {"client_id": "c"}, subscription, False, compression, size, 100, now)[
            1
        ]

    assert subscriptions.get(iid, {"client_id": "c"}, 10_500)[1] == THROTTLED
    assert push(10_100) == 0  # right after GetTelemetrySubscriptions: accepted (the client's jitter)
    assert push(10_600) == THROTTLED
    assert push(11_100) == 0
    assert push(12_100, size=101) == int(ErrorCode.TELEMETRY_TOO_LARGE)
    assert push(13_100, compression=9) == int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    subscriptions.replace({"all": {"metrics": "org.", "interval.ms": "1000"}})
    assert push(14_100) == int(ErrorCode.UNKNOWN_SUBSCRIPTION_ID)
    again, error = subscriptions.get(iid, {"client_id": "c"}, 14_200)  # at once after that error
    assert error == 0 and again.metrics == ("org.",) and again.subscription_id != sid
    terminating = subscriptions.push(iid, {"client_id": "c"}, again.subscription_id, True, 0, 10, 100, 14_300)
    assert terminating[1] == 0
    assert push(20_000, subscription=again.subscription_id) == int(
        ErrorCode.INVALID_REQUEST
    )  # after the last


def test_a_selector_on_what_the_broker_does_not_know_matches_nothing() -> None:
    subscriptions = _subscriptions()
    subscriptions.replace({"any-port": {"metrics": "*", "match": "client_source_port=.*"}})
    without_port, _ = subscriptions.get(bytes(16), {"client_id": "c"}, 10_000)
    assert without_port.metrics == ()  # `.*` matches "", but an unknown port is not ""
    with_port, _ = subscriptions.get(bytes(16), {"client_id": "c", "client_source_port": "51234"}, 10_000)
    assert with_port.metrics == (ALL_METRICS,)
