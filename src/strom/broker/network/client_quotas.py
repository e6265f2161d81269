"""The broker's client quotas: which quota applies to a request, its rate, and the throttle it earns.

Theory of operation (Kafka's ``ClientQuotaManager`` family, KIP-13/KIP-124/KIP-219/KIP-599). The quotas
configured for users and client ids (`strom.quota.entity`) are loaded from the metadata store at start
and again on every ``/config/changes`` notification about a user or client (`ClientQuotas.replace`), so
every broker of the cluster applies the same ones. Each quota type has its own sensors, keyed by the
metric tags of the entity that supplied the quota (a user's quota is one sensor for all its client ids;
a default quota one per user or client id). A request records its value on the sensor of each quota
type it is subject to:

| quota | recorded value | requests |
|---|---|---|
| ``producer_byte_rate`` | the request's size in bytes | Produce |
| ``consumer_byte_rate`` | the response's size in bytes | a consumer's Fetch (not a follower's) |
| ``request_percentage`` | handler time, % of one thread-second | all but ApiVersions and SASL |
| ``controller_mutation_rate`` | partitions created or deleted | Create/DeleteTopics, CreatePartitions |

then compares the sensor's rate (strom.quota.rate: Kafka's sampled windows, ``quota.window.num`` x
``quota.window.size.seconds``) with the bound. Above it, the request earns a throttle time, which its
response carries in ``throttle_time_ms`` and for which the connection stops reading (server.py: the
THROTTLED state of connection_state.py). The controller mutation rate is the exception (KIP-599): its
sensor also keeps a token bucket, and the mutation requests' handlers ask it topic by topic through the
`MutationQuota` that `ClientQuotas.mutation_quota` hands the request (strom.quota.mutation: from
CreateTopics v6, DeleteTopics v5 and CreatePartitions v3 a topic over the quota is refused with
THROTTLING_QUOTA_EXCEEDED instead of made).

With no quota configured, `ClientQuotas.active` is False and the request path tests only that (the
fast path: no lookup, no clock read, no sensor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from strom.quota.entity import CONTROLLER_MUTATION_RATE, REQUEST_PERCENTAGE, QuotaEntity, metric_tags, resolve
from strom.quota.mutation import MutationQuota
from strom.quota.rate import SampledRate, TokenBucket, throttle_time_ms

__all__ = ["ClientQuotas", "QuotaSensor", "quota_user"]


def quota_user(principal: str) -> str:
    """The quota user of a principal: its name (``User:alice`` -> ``alice``; unauthenticated: ANONYMOUS)."""
    return principal.partition(":")[2] or principal


@dataclass(slots=True)
class QuotaSensor:
    """One (quota type, user, client id) sensor: the rate it bounds and the throttle times it gave."""

    rate: SampledRate
    throttle_total: SampledRate
    throttle_count: SampledRate
    bound: float = 0.0
    throttled_ms_total: int = field(default=0)
    tokens: TokenBucket | None = None  # the controller mutation quota's bucket (KIP-599)

    def note_throttle(self, throttle: int, now_ms: int) -> None:
        self.throttle_total.record(throttle, now_ms)
        self.throttle_count.record(1, now_ms)
        self.throttled_ms_total += throttle

    def throttle_time_avg(self, now_ms: int) -> float:
        """Kafka's ``throttle-time`` metric: the average throttle over the sampled windows."""
        count = self.throttle_count.total(now_ms)
        return self.throttle_total.total(now_ms) / count if count else 0.0


class ClientQuotas:
    """Every quota type's configured quotas and sensors on this broker; see the module docstring."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._keys: frozenset[str] = frozenset()  # the quota types some entity sets
        # (quota key, user, client id) -> (sensor tags, bound), or None: no quota of that type applies.
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str], float] | None] = {}
        self._sensors: dict[tuple[str, str, str], QuotaSensor] = {}  # (key, user tag, client tag)
        self.active = False

    @property
    def quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]:
        return self._quotas

    def replace(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Apply a new set of configured quotas (from the metadata store)."""
        self._quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._keys = frozenset(key for values in self._quotas.values() for key in values)
        self._resolved.clear()
        self.active = bool(self._quotas)

    def applies(self, key: str) -> bool:
        """Whether any entity sets a quota of this type (so its requests need recording)."""
        return key in self._keys

    def _sensor(self, key: str, user: str, client_id: str, now_ms: int) -> QuotaSensor | None:
        """The sensor of quota ``key`` this client records on, its bound set; None: no such quota."""
        if key not in self._keys:
            return None
        cache_key = (key, user, client_id)
        try:
            found = self._resolved[cache_key]
        except KeyError:
            match = resolve(self._quotas, key, user, client_id)
            found = None if match is None else (metric_tags(match[0], user, client_id), match[1])
            self._resolved[cache_key] = found
        if found is None:
            return None
        tags, bound = found
        sensor_key = (key, *tags)
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = QuotaSensor(
                SampledRate(self.samples, self.window_ms, now_ms),
                SampledRate(self.samples, self.window_ms, now_ms),
                SampledRate(self.samples, self.window_ms, now_ms),
            )
            self._sensors[sensor_key] = sensor
        sensor.bound = bound
        return sensor

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the request's sensor of quota ``key``; the throttle time it earns (ms)."""
        sensor = self._sensor(key, user, client_id, now_ms)
        if sensor is None:
            return 0
        sensor.rate.record(value, now_ms)
        throttle = throttle_time_ms(sensor.rate, sensor.bound, now_ms, bounded=key == REQUEST_PERCENTAGE)
        sensor.note_throttle(throttle, now_ms)
        return throttle

    def mutation_quota(
        self, user: str, client_id: str, strict: bool, clock: Callable[[], int]
    ) -> MutationQuota | None:
        """The controller mutation quota of one request from this client; None when none applies."""
        now_ms = clock()
        sensor = self._sensor(CONTROLLER_MUTATION_RATE, user, client_id, now_ms)
        if sensor is None:
            return None
        bucket = sensor.tokens
        if bucket is None:
            bucket = sensor.tokens = TokenBucket(sensor.bound, self.samples, self.window_ms, now_ms)
        elif bucket.quota != sensor.bound:
            bucket.set_quota(sensor.bound, self.samples, self.window_ms, now_ms)
        return MutationQuota(bucket, sensor.rate, strict, clock)

    def mutation_done(self, quota: MutationQuota, user: str, client_id: str, now_ms: int) -> None:
        """Note the throttle time a mutation request earned on its sensor (the throttle-time metric)."""
        sensor = self._sensor(CONTROLLER_MUTATION_RATE, user, client_id, now_ms)
        if sensor is not None:
            sensor.note_throttle(quota.throttle_ms, now_ms)

    def sensors(self) -> Iterator[tuple[str, str, str, QuotaSensor]]:
        """(quota key, user tag, client-id tag, sensor) of every sensor, for /metrics."""
        for (key, user, client_id), sensor in self._sensors.items():
            yield key, user, client_id, sensor
