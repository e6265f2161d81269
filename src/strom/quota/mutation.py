"""One request's controller mutation quota (KIP-599): strict for the versions that know
THROTTLING_QUOTA_EXCEEDED, permissive for the older ones.

Theory of operation (Kafka's ``ControllerMutationQuota``). CreateTopics, CreatePartitions and DeleteTopics
count the partitions they create or delete against the client's ``controller_mutation_rate``, a token
bucket (`strom.quota.rate.TokenBucket`). The handler asks `MutationQuota.admit` for each topic, after the
topic passed its own checks and before the change is made:

- **strict** (CreateTopics v6+, DeleteTopics v5+, CreatePartitions v3+): if the bucket is already below
  zero the topic is refused with THROTTLING_QUOTA_EXCEEDED and nothing is recorded; otherwise its
  partitions are taken from the bucket, even if that takes it below zero (one request may overdraw, the
  next ones wait). The client learns from ``throttle_time_ms`` how long to back off.
- **permissive** (older versions): every topic is admitted and recorded; the response's
  ``throttle_time_ms`` (and the muted connection) is the only brake, as for the other quotas.

`throttle_ms` is the throttle time of the last violation the request saw, which the listener writes into
the response and for which it stops reading the connection. Without a quota for the client the handler
gets no `MutationQuota` at all. Pure: the clock is a function handed in.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.quota.rate import SampledRate, TokenBucket

__all__ = ["MutationQuota", "strict_mutation_quota"]

# The first version of each mutation API whose response may carry THROTTLING_QUOTA_EXCEEDED (KIP-599).
_STRICT_FROM = {19: 6, 20: 5, 37: 3}  # CreateTopics, DeleteTopics, CreatePartitions


def strict_mutation_quota(api_key: int, api_version: int) -> bool:
    """Whether this request's topics may be refused with THROTTLING_QUOTA_EXCEEDED."""
    first = _STRICT_FROM.get(api_key)
    return first is not None and api_version >= first


class MutationQuota:
    """The controller mutation quota of one request; see the module docstring."""

    __slots__ = ("_bucket", "_now_ms", "_rate", "strict", "throttle_ms")

    def __init__(
        self,
        bucket: TokenBucket,
        rate: SampledRate,
        strict: bool,
        now_ms: Callable[[], int],
    ) -> None:
        self._bucket = bucket
        self._rate = rate  # the mutation-rate metric's sensor (what /metrics shows)
        self._now_ms = now_ms
        self.strict = strict
        self.throttle_ms = 0

    def admit(self, partitions: int) -> bool:
        """Record ``partitions`` mutations if the quota allows them now; False: refuse the topic."""
        now = self._now_ms()
        if self.strict and self._bucket.measure(now) < 0:
            self.throttle_ms = self._bucket.throttle_ms(now)
            return False
        self._bucket.record(partitions, now)
        self._rate.record(partitions, now)
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, self._bucket.throttle_ms(now))
        return True
