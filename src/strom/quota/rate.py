"""Kafka's quota arithmetic: a rate over sampled windows, and the throttle time of a violation.

Theory of operation (Kafka's ``SampledStat``/``Rate`` and ``QuotaUtils``, the metrics behind every client
quota). A `SampledRate` keeps ``samples`` (``quota.window.num``, 11) samples of ``window_ms``
(``quota.window.size.seconds``, 1 s) each, in a ring. A value is added to the current sample; once that
sample is ``window_ms`` old the next one (the oldest, reset) becomes current. A sample that started
``samples * window_ms`` or more ago is obsolete and reset before the rate is measured. The rate is the
sum of the samples over the elapsed time since the oldest sample started, where the elapsed time is at
least ``samples - 1`` full windows: a fresh sensor does not report a huge rate for its first bytes.

A quota is checked after recording (Kafka records, then compares): when the measured rate exceeds the
bound, the client is throttled for ``(rate - bound) / bound * window`` ms, the time after which the same
bytes over the longer window would be within the bound. The request-time quota (``request_percentage``)
caps its throttle at one window (Kafka's bound for it); the byte rates do not.

The controller mutation rate (KIP-599) is judged by a `TokenBucket` instead, so that a burst of topic
creations is allowed and then paid back: the bucket holds at most ``(samples - 1) * window`` seconds'
worth of the quota, starts full, refills at the quota's rate, and each mutation takes its partition count
from it (it may go below zero). A client is over its quota while the bucket is below zero, and the
throttle time is how long the refill takes to bring it back to zero: ``-tokens / quota`` seconds.
Pure: times are passed in, in milliseconds.
"""

from __future__ import annotations

__all__ = ["SampledRate", "TokenBucket", "throttle_time_ms"]


class SampledRate:
    """A rate per second over ``samples`` windows of ``window_ms``; see the module docstring."""

    __slots__ = ("_current", "_samples", "_starts", "_values", "window_ms")

    def __init__(self, samples: int, window_ms: int, now_ms: int) -> None:
        if samples < 1 or window_ms <= 0:
            raise ValueError("a sampled rate needs at least one sample of a positive window")
        self.window_ms = window_ms
        self._samples = samples
        self._starts = [now_ms]
        self._values = [0.0]
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        i = self._current
        if now_ms - self._starts[i] >= self.window_ms:
            i = (i + 1) % self._samples
            if i == len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[i], self._values[i] = now_ms, 0.0
            self._current = i
        self._values[i] += value

    def _purge(self, now_ms: int) -> None:
        expire_ms = self._samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire_ms:
                self._starts[i], self._values[i] = now_ms, 0.0

    def window_size_ms(self, now_ms: int) -> int:
        """The elapsed time the rate divides by: since the oldest sample, at least samples-1 windows."""
        self._purge(now_ms)
        elapsed = now_ms - min(self._starts)
        full = elapsed // self.window_ms
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self.window_ms
        return elapsed

    def rate(self, now_ms: int) -> float:
        """Per second over the sampled windows."""
        window = self.window_size_ms(now_ms)  # purges first
        return sum(self._values) * 1000.0 / window

    def total(self, now_ms: int) -> float:
        """The sum of the live samples."""
        self._purge(now_ms)
        return sum(self._values)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: int, bounded: bool = False) -> int:
    """How long to throttle a client whose ``rate`` is above ``bound`` (0 when within it); ``bounded``:
    at most one window."""
    value = rate.rate(now_ms)
    if value <= bound:
        return 0
    window = rate.window_size_ms(now_ms)
    throttle = round((value - bound) / bound * window)
    return min(throttle, rate.window_ms) if bounded else throttle


class TokenBucket:
    """Kafka's ``TokenBucket`` stat for the controller mutation quota; see the module docstring."""

    __slots__ = ("_updated_ms", "burst", "quota", "tokens")

    def __init__(self, quota: float, samples: int, window_ms: int, now_ms: int) -> None:
        if quota <= 0 or samples < 1 or window_ms <= 0:
            raise ValueError("a token bucket needs a positive quota and window")
        self.quota = quota  # tokens per second
        self.burst = (samples - 1) * window_ms / 1000.0 * quota
        self.tokens = self.burst
        self._updated_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        elapsed = max(0, now_ms - self._updated_ms)
        self.tokens = min(self.burst, self.tokens + self.quota * elapsed / 1000.0)
        self._updated_ms = max(self._updated_ms, now_ms)

    def set_quota(self, quota: float, samples: int, window_ms: int, now_ms: int) -> None:
        """A changed quota (from the metadata store): refill at the old rate, then use the new one."""
        self._refill(now_ms)
        self.quota = quota
        self.burst = (samples - 1) * window_ms / 1000.0 * quota
        self.tokens = min(self.tokens, self.burst)

    def measure(self, now_ms: int) -> float:
        """The tokens left (negative: owed)."""
        self._refill(now_ms)
        return self.tokens

    def record(self, value: float, now_ms: int) -> None:
        self._refill(now_ms)
        self.tokens = min(self.burst, self.tokens - value)

    def throttle_ms(self, now_ms: int) -> int:
        """How long until the bucket is back at zero (0 when it is not below zero)."""
        tokens = self.measure(now_ms)
        return 0 if tokens >= 0 else round(-tokens / self.quota * 1000.0)
