"""The backlog controller's decisions (strom.broker.lake.backlog): the bound from the broker's setting
or the topic's target lag; idle within the bound, raised past it, lowered again only under half of it."""

from __future__ import annotations

from strom.broker.lake.backlog import (
    DEFAULT_BOUND_FACTOR,
    LOWER_FRACTION,
    BacklogController,
    backlog_bound_ms,
    raised_share,
)


def test_the_bound_is_the_setting_or_a_multiple_of_the_target_lag() -> None:
    assert backlog_bound_ms(5_000, 60_000) == 5_000
    assert backlog_bound_ms(0, 60_000) == 0
    assert backlog_bound_ms(-1, 1_000) == DEFAULT_BOUND_FACTOR * 1_000
    assert backlog_bound_ms(-1, 60_000) == DEFAULT_BOUND_FACTOR * 60_000


def test_idle_within_the_bound_raised_past_it() -> None:
    assert not raised_share(0, 10_000, raised=False)
    assert not raised_share(10_000, 10_000, raised=False)
    assert raised_share(10_001, 10_000, raised=False)
    assert raised_share(1, 0, raised=False)  # a bound of 0: any lag raises


def test_once_raised_it_stays_so_until_the_lag_is_under_the_lower_fraction() -> None:
    lower = 10_000 * LOWER_FRACTION
    assert raised_share(9_000, 10_000, raised=True)
    assert raised_share(lower + 1, 10_000, raised=True)
    assert not raised_share(lower, 10_000, raised=True)
    assert not raised_share(0, 10_000, raised=True)


def test_the_controller_follows_the_lag_and_counts_rounds_by_share() -> None:
    controller = BacklogController()
    shares = [controller.update(lag, 1_000) for lag in (100, 900, 1_200, 800, 600, 400, 1_100)]
    assert shares == [False, False, True, True, True, False, True]
    controller.counted(True)
    controller.counted(False)
    controller.counted(True)
    assert (controller.idle_rounds, controller.raised_rounds) == (1, 2)
