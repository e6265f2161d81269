"""The controller mutation quota's arithmetic (KIP-599): Kafka's token bucket, and the strict and
permissive admission of topics a request creates or deletes."""

from __future__ import annotations

import pytest

from strom.quota.mutation import MutationQuota, strict_mutation_quota
from strom.quota.rate import SampledRate, TokenBucket


def test_the_bucket_starts_full_with_samples_minus_one_windows_of_the_quota() -> None:
    bucket = TokenBucket(quota=5.0, samples=11, window_ms=1000, now_ms=0)
    assert bucket.burst == 50.0
    assert bucket.measure(0) == 50.0
    bucket.record(60, 0)
    assert bucket.measure(0) == -10.0
    assert bucket.throttle_ms(0) == 2000  # 10 tokens owed at 5 per second
    assert bucket.measure(1000) == pytest.approx(-5.0)
    assert bucket.throttle_ms(1000) == 1000
    assert bucket.measure(100_000) == 50.0  # refilled, never above the burst


def test_a_lower_quota_caps_the_tokens_at_its_burst() -> None:
    bucket = TokenBucket(quota=10.0, samples=2, window_ms=1000, now_ms=0)
    assert bucket.measure(0) == 10.0
    bucket.set_quota(2.0, samples=2, window_ms=1000, now_ms=0)
    assert bucket.measure(0) == 2.0
    bucket.record(4, 0)
    assert bucket.throttle_ms(0) == 1000


@pytest.mark.parametrize(
    ("api_key", "strict_from"),
    [(19, 6), (20, 5), (37, 3)],  # CreateTopics, DeleteTopics, CreatePartitions
)
def test_the_versions_that_may_refuse_a_topic(api_key: int, strict_from: int) -> None:
    assert not strict_mutation_quota(api_key, strict_from - 1)
    assert strict_mutation_quota(api_key, strict_from)
    assert not strict_mutation_quota(0, 12)  # Produce has no mutation quota


def _quota(strict: bool, now: list[int]) -> tuple[MutationQuota, TokenBucket]:
    bucket = TokenBucket(quota=2.0, samples=2, window_ms=1000, now_ms=0)  # a burst of 2
    return MutationQuota(bucket, SampledRate(2, 1000, 0), strict, lambda: now[0]), bucket


def test_strict_admits_while_the_bucket_is_not_below_zero_and_refuses_after() -> None:
    now = [0]
    quota, bucket = _quota(True, now)
    assert quota.admit(1) and quota.admit(1)  # the burst spent
    assert quota.admit(6)  # at zero still admitted: one request may overdraw
    assert bucket.measure(0) == -6.0
    assert quota.throttle_ms == 0  # Kafka sets no throttle for an overdraw that was admitted
    assert not quota.admit(1)
    assert quota.throttle_ms == 3000
    assert bucket.measure(0) == -6.0  # a refused topic records nothing
    now[0] = 3000
    assert quota.admit(1)


def test_permissive_admits_everything_and_reports_the_throttle() -> None:
    now = [0]
    quota, bucket = _quota(False, now)
    assert quota.admit(2)
    assert quota.throttle_ms == 0
    assert quota.admit(4) and quota.admit(4)
    assert quota.throttle_ms == 4000
    assert bucket.measure(0) == -8.0
