"""Client quotas, the pure parts: Kafka's eight levels of precedence, DescribeClientQuotas' filters,
the value checks, the sampled rate and throttle time, and the broker's sensors (strom.quota,
strom.broker.network.client_quotas)."""

from __future__ import annotations

import pytest

from strom.broker.network.client_quotas import ClientQuotas, quota_user
from strom.quota.entity import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    candidates,
    check_quota_value,
    metric_tags,
    resolve,
)
from strom.quota.filters import (
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    FilterComponent,
    InvalidFilter,
    check_filter,
    matches,
)
from strom.quota.rate import SampledRate, throttle_time_ms

# Kafka's documented order for user "alice" with client id "app", most specific first.
LEVELS = [
    QuotaEntity("alice", "app"),
    QuotaEntity("alice", DEFAULT),
    QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "app"),
    QuotaEntity(DEFAULT, DEFAULT),
    QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "app"),
    QuotaEntity(None, DEFAULT),
]


def test_the_eight_levels_in_kafkas_order() -> None:
    assert list(candidates("alice", "app")) == LEVELS


@pytest.mark.parametrize("level", range(8))
def test_each_level_beats_every_level_below_it(level: int) -> None:
    # Every level from `level` down sets a quota of its own; the most specific of them wins.
    quotas = {entity: {PRODUCER_BYTE_RATE: float(1000 + i)} for i, entity in enumerate(LEVELS) if i >= level}
    assert resolve(quotas, PRODUCER_BYTE_RATE, "alice", "app") == (LEVELS[level], 1000.0 + level)


def test_each_quota_type_resolves_on_its_own() -> None:
    quotas = {
        QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 10.0},
        QuotaEntity(None, DEFAULT): {CONSUMER_BYTE_RATE: 20.0},
    }
    assert resolve(quotas, PRODUCER_BYTE_RATE, "alice", "app") == (QuotaEntity("alice", None), 10.0)
    assert resolve(quotas, CONSUMER_BYTE_RATE, "alice", "app") == (QuotaEntity(None, DEFAULT), 20.0)
    assert resolve(quotas, PRODUCER_BYTE_RATE, "bob", "app") is None
    assert resolve(quotas, REQUEST_PERCENTAGE, "alice", "app") is None


def test_metric_tags_share_a_users_quota_and_split_a_default_one() -> None:
    assert metric_tags(QuotaEntity("alice", None), "alice", "app") == ("alice", "")
    assert metric_tags(QuotaEntity(DEFAULT, None), "bob", "app") == ("bob", "")
    assert metric_tags(QuotaEntity(None, DEFAULT), "bob", "tool") == ("", "tool")
    assert metric_tags(QuotaEntity("alice", DEFAULT), "alice", "tool") == ("alice", "tool")


def test_entities_from_and_to_the_wire() -> None:
    assert QuotaEntity.from_wire({"user": None, "client-id": "app"}) == QuotaEntity(DEFAULT, "app")
    assert QuotaEntity(DEFAULT, "app").to_wire() == [("user", None), ("client-id", "app")]
    assert QuotaEntity(None, "<default>").client_id != DEFAULT  # a client literally named so is a name
    with pytest.raises(ValueError, match="unsupported quota entity"):
        QuotaEntity.from_wire({"ip": "10.0.0.1"})
    with pytest.raises(ValueError, match="names a user, a client id or both"):
        QuotaEntity.from_wire({})
    assert QuotaEntity("alice", DEFAULT).describe() == "user-principal 'alice', the default client-id"


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (PRODUCER_BYTE_RATE, 1024.0, None),
        (PRODUCER_BYTE_RATE, 1024.5, "whole number"),
        (CONSUMER_BYTE_RATE, 0.0, "positive"),
        (REQUEST_PERCENTAGE, 12.5, None),
        ("controller_mutation_rate", 0.5, None),
        ("producer_rate", 1.0, "unknown quota key"),
        (REQUEST_PERCENTAGE, float("inf"), "positive"),
    ],
)
def test_quota_values_are_checked_as_kafka_checks_them(key: str, value: float, error: str | None) -> None:
    if error is None:
        check_quota_value(key, value)
    else:
        with pytest.raises(ValueError, match=error):
            check_quota_value(key, value)


STORED = [
    QuotaEntity("alice", None),
    QuotaEntity("alice", "app"),
    QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "app"),
    QuotaEntity(None, DEFAULT),
]


@pytest.mark.parametrize(
    ("components", "strict", "expected"),
    [
        ([], False, STORED),
        ([], True, []),
        ([FilterComponent("user", MATCH_EXACT, "alice")], False, STORED[:2]),
        ([FilterComponent("user", MATCH_EXACT, "alice")], True, STORED[:1]),
        ([FilterComponent("user", MATCH_DEFAULT)], False, [STORED[2]]),
        ([FilterComponent("user", MATCH_ANY)], True, [*STORED[:1], STORED[2]]),
        ([FilterComponent("client-id", MATCH_ANY)], False, [STORED[1], STORED[3], STORED[4]]),
        ([FilterComponent("client-id", MATCH_DEFAULT)], True, [STORED[4]]),
        (
            [FilterComponent("user", MATCH_EXACT, "alice"), FilterComponent("client-id", MATCH_ANY)],
            True,
            [STORED[1]],
        ),
    ],
)
def test_describe_filters(
    components: list[FilterComponent], strict: bool, expected: list[QuotaEntity]
) -> None:
    check_filter(components)
    assert [e for e in STORED if matches(e, components, strict)] == expected


@pytest.mark.parametrize(
    "components",
    [
        [FilterComponent("user", MATCH_ANY), FilterComponent("user", MATCH_DEFAULT)],
        [FilterComponent("ip", MATCH_ANY)],
        [FilterComponent("user", 7)],
        [FilterComponent("user", MATCH_EXACT, None)],
    ],
)
def test_malformed_filters_are_refused(components: list[FilterComponent]) -> None:
    with pytest.raises(InvalidFilter):
        check_filter(components)


def test_a_fresh_rate_divides_by_the_full_windows() -> None:
    rate = SampledRate(11, 1000, now_ms=0)
    rate.record(1000, 0)
    # 10 full windows at least: 1000 bytes in the first millisecond is 100 bytes/s, not 1 MB/s.
    assert rate.window_size_ms(0) == 10_000
    assert rate.rate(0) == pytest.approx(100.0)
    assert rate.window_size_ms(500) == 10_500


def test_the_rate_forgets_samples_older_than_the_windows() -> None:
    rate = SampledRate(3, 1000, now_ms=0)
    for t in range(0, 3000, 100):
        rate.record(100, t)  # 1000 per second for three seconds
    assert rate.rate(2999) == pytest.approx(3000 * 1000 / 2999, rel=0.01)
    rate.record(0, 6000)
    assert rate.total(6000) == 0  # every earlier sample is obsolete


def test_throttle_time_is_the_time_the_excess_takes_to_drain() -> None:
    rate = SampledRate(11, 1000, now_ms=0)
    rate.record(2000, 0)  # 200 per second over the 10-second window
    assert throttle_time_ms(rate, 100.0, 0) == 10_000  # (200 - 100) / 100 x 10 s
    assert throttle_time_ms(rate, 100.0, 0, bounded=True) == 1000  # request quotas: one window at most
    assert throttle_time_ms(rate, 400.0, 0) == 0


def test_a_producer_held_to_its_quota_by_throttling() -> None:
    """A client that sends whenever its throttle allows converges on the bound."""
    quotas = ClientQuotas(samples=11, window_ms=1000)
    quotas.replace({QuotaEntity(None, "app"): {PRODUCER_BYTE_RATE: 100_000.0}})
    now, sent, throttled = 0, 0, 0
    while now < 120_000:
        throttle = quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "app", 50_000, now)
        sent += 50_000
        throttled += throttle > 0
        now += max(throttle, 10)
    assert throttled
    assert sent / (now / 1000) == pytest.approx(100_000, rel=0.1)
    [(key, user, client, sensor)] = list(quotas.sensors())
    assert (key, user, client) == (PRODUCER_BYTE_RATE, "", "app")
    assert sensor.throttle_time_avg(now) > 0


def test_no_quota_means_an_inactive_manager_and_no_sensor() -> None:
    quotas = ClientQuotas(samples=11, window_ms=1000)
    assert not quotas.active
    quotas.replace({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 10.0}})
    assert quotas.active and quotas.applies(PRODUCER_BYTE_RATE) and not quotas.applies(CONSUMER_BYTE_RATE)
    assert quotas.record(PRODUCER_BYTE_RATE, "bob", "app", 10**9, 0) == 0
    assert quotas.record(CONSUMER_BYTE_RATE, "alice", "app", 10**9, 0) == 0
    assert not list(quotas.sensors())
    quotas.replace({})
    assert not quotas.active


def test_the_quota_user_is_the_principals_name() -> None:
    assert quota_user("User:alice") == "alice"
    assert quota_user("User:ANONYMOUS") == "ANONYMOUS"
    assert quota_user("User:CN=broker,O=strom") == "CN=broker,O=strom"
