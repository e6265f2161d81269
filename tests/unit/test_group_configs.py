"""A group's own configs: validated against the broker's bounds, else the broker's value."""

from __future__ import annotations

import pytest

from strom.coordinator.group_configs import check, value
from strom.protocol.errors import ErrorCode, KafkaError

BROKER = {
    "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
    "share.auto.offset.reset": "latest",
}


@pytest.mark.parametrize(
    "overrides",
    [
        {"share.record.lock.duration.ms": "14999"},
        {"share.record.lock.duration.ms": "60001"},
        {"share.record.lock.duration.ms": "soon"},
        {"share.auto.offset.reset": "by_duration:PT1H"},
        {"consumer.session.timeout.ms": "44999"},
        {"share.no.such.config": "1"},
    ],
)
def test_a_value_outside_the_bounds_or_an_unknown_name_is_an_invalid_config(
    overrides: dict[str, str],
) -> None:
    with pytest.raises(KafkaError) as refused:
        check(overrides, BROKER.__getitem__)
    assert refused.value.code is ErrorCode.INVALID_CONFIG


def test_a_groups_value_is_its_own_else_the_brokers() -> None:
    own = {"share.record.lock.duration.ms": "15000", "share.auto.offset.reset": "earliest"}
    check(own, BROKER.__getitem__)
    assert value(own, BROKER.__getitem__, "share.record.lock.duration.ms") == "15000"
    assert value({}, BROKER.__getitem__, "share.record.lock.duration.ms") == "30000"
    assert value({}, BROKER.__getitem__, "share.auto.offset.reset") == "latest"
