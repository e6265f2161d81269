"""Client-metrics subscriptions and the client instances that follow them (KIP-714).

Theory of operation (Kafka's ``ClientMetricsManager``). An operator configures *subscriptions*: the
CLIENT_METRICS config resource (type 16) named by the subscription, with three configs:

| config | meaning |
|---|---|
| ``metrics`` | metric name prefixes the matching clients push (``*``: all; empty: none) |
| ``interval.ms`` | their push interval, 100 ms to 1 h (default 5 min) |
| ``match`` | ``selector=regex`` pairs a client must all match in full (none: every client) |

The selectors: ``client_instance_id``, ``client_id``, ``client_software_name``,
``client_software_version``, ``client_source_address``, ``client_source_port``; a client is matched on
the attributes the broker passes in, and a selector on an attribute it leaves out matches nothing.

A client asks GetTelemetrySubscriptions with its *instance id* (all zeros the first time: the broker
draws one). Its instance is made from every subscription it matches: the union of their metrics
(``*`` alone if any has it) and the shortest interval; the subscription id is a CRC-32 of those, XORed
with a hash of the instance id, so it changes when they change. Instances are made again after any
subscription changes (a version counter). Throttling, as Kafka: a GetTelemetrySubscriptions sooner than
the push interval after the client's last request is THROTTLING_QUOTA_EXCEEDED (unless its last push
was refused for an unknown subscription or compression type); a push is accepted right after a
GetTelemetrySubscriptions (clients jitter their first push) or one interval after the previous push,
and refused after a terminating push, for another subscription id (UNKNOWN_SUBSCRIPTION_ID), for a
compression type Kafka does not know (UNSUPPORTED_COMPRESSION_TYPE) or above ``telemetry.max.bytes``
(TELEMETRY_TOO_LARGE). At most `MAX_INSTANCES` instances are kept, the least recently seen dropped
first. Pure: times are passed in; the broker side is strom.broker.client_telemetry.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.uuid_text import uuid_text

__all__ = [
    "ACCEPTED_COMPRESSION",
    "ALL_METRICS",
    "CLIENT_METRICS_CONFIGS",
    "ClientInstance",
    "MetricKey",
    "Subscription",
    "Subscriptions",
    "parse_subscription",
]

METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
CLIENT_METRICS_CONFIGS = (METRICS, INTERVAL_MS, MATCH)
INTERVAL_DEFAULT_MS, INTERVAL_MIN_MS, INTERVAL_MAX_MS = 300_000, 100, 3_600_000
ALL_METRICS = "*"
MATCH_SELECTORS = frozenset(
    {
        "client_instance_id",
        "client_id",
        "client_software_name",
        "client_software_version",
        "client_source_address",
        "client_source_port",
    }
)
# zstd, lz4, gzip, snappy: Kafka's order of preference (a client takes the first it supports).
ACCEPTED_COMPRESSION = (4, 3, 1, 2)
_KNOWN_COMPRESSION = frozenset({0, *ACCEPTED_COMPRESSION})
MAX_INSTANCES = 16_384
# A pushed metric: its name and its data point's attributes, sorted.
MetricKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, attributes: Mapping[str, str]) -> bool:
        # A selector on something the broker does not know of the client matches nothing (Kafka's rule).
        return all(
            (value := attributes.get(key)) is not None and pattern.fullmatch(value) is not None
            for key, pattern in self.match
        )


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """A subscription from its configs (KafkaError INVALID_CONFIG / INVALID_REQUEST, as Kafka checks)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a client-metrics subscription needs a name")
    unknown = sorted(set(configs) - set(CLIENT_METRICS_CONFIGS))
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown client-metrics configs: {unknown}")
    try:
        interval = int(configs.get(INTERVAL_MS, INTERVAL_DEFAULT_MS))
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{INTERVAL_MS} must be an integer") from None
    if not INTERVAL_MIN_MS <= interval <= INTERVAL_MAX_MS:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"{INTERVAL_MS} must be between {INTERVAL_MIN_MS} and {INTERVAL_MAX_MS}, not {interval}",
        )
    match: list[tuple[str, re.Pattern[str]]] = []
    for pair in _items(configs.get(MATCH, "")):
        key, sep, regex = pair.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_SELECTORS:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"{MATCH}: {pair!r} is not selector=regex ({sorted(MATCH_SELECTORS)})",
            )
        try:
            match.append((key, re.compile(regex.strip())))
        except re.error as exc:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"{MATCH}: bad regular expression {regex!r}: {exc}"
            ) from None
    return Subscription(name, tuple(_items(configs.get(METRICS, ""))), interval, tuple(match))


@dataclass(slots=True)
class ClientInstance:
    instance_id: bytes
    attributes: dict[str, str]
    subscription_id: int
    version: int
    metrics: tuple[str, ...]
    push_interval_ms: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    terminating: bool = False
    last_error: int = 0
    # The latest value of each metric pushed (otlp.py): (name, its attributes) -> value.
    values: dict[MetricKey, float] = field(default_factory=dict)


def subscription_id(metrics: tuple[str, ...], interval_ms: int, instance_id: bytes) -> int:
    crc = zlib.crc32(f"{sorted(metrics)}{interval_ms}".encode())  # an id, not a checksum on the wire
    value = crc ^ int.from_bytes(instance_id[:4], "big") ^ int.from_bytes(instance_id[12:], "big")
    return value - (1 << 32) if value >= 1 << 31 else value


class Subscriptions:
    """The subscriptions configured and the client instances known; see the module docstring."""

    def __init__(self, new_instance_id: Callable[[], bytes]) -> None:
        self._new_id = new_instance_id
        self.subscriptions: dict[str, Subscription] = {}
        self.version = 0
        self.instances: OrderedDict[bytes, ClientInstance] = OrderedDict()

    def replace(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        """Take the subscriptions from the metadata store (an invalid one is skipped)."""
        subscriptions: dict[str, Subscription] = {}
        for name, configs in stored.items():
            if configs:
                try:
                    subscriptions[name] = parse_subscription(name, configs)
                except KafkaError:
                    continue
        if subscriptions != self.subscriptions:
            self.subscriptions = subscriptions
            self.version += 1

    def _make(self, instance_id: bytes, attributes: dict[str, str]) -> ClientInstance:
        attributes = {**attributes, "client_instance_id": uuid_text(instance_id)}
        interval = INTERVAL_DEFAULT_MS
        metrics: set[str] = set()
        for subscription in self.subscriptions.values():
            if subscription.matches(attributes):
                metrics.update(subscription.metrics)
                interval = min(interval, subscription.interval_ms)
        chosen = (ALL_METRICS,) if ALL_METRICS in metrics else tuple(sorted(metrics))
        return ClientInstance(
            instance_id,
            attributes,
            subscription_id(chosen, interval, instance_id),
            self.version,
            chosen,
            interval,
        )

    def instance(self, instance_id: bytes, attributes: dict[str, str]) -> ClientInstance:
        """The client's instance, made (again, if the subscriptions changed since) as needed."""
        found = self.instances.get(instance_id)
        if found is None or found.version != self.version:
            made = self._make(instance_id, attributes)
            if found is not None:
                made.last_get_ms, made.last_push_ms = found.last_get_ms, found.last_push_ms
                made.last_error, made.values = found.last_error, found.values
            found = made
        self.instances[instance_id] = found
        self.instances.move_to_end(instance_id)
        while len(self.instances) > MAX_INSTANCES:
            self.instances.popitem(last=False)
        return found

    def get(self, instance_id: bytes, attributes: dict[str, str], now_ms: int) -> tuple[ClientInstance, int]:
        """GetTelemetrySubscriptions: the client's instance (a new id if it had none) and the error."""
        if instance_id == bytes(16):
            instance_id = self._new_id()
        found = self.instance(instance_id, attributes)
        last = max(found.last_get_ms, found.last_push_ms)
        if last and now_ms - last < found.push_interval_ms and found.last_error not in _RETRY_AT_ONCE:
            return found, int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        found.last_get_ms = now_ms
        found.last_error = 0
        return found, 0

    def push(
        self,
        instance_id: bytes,
        attributes: dict[str, str],
        pushed_subscription: int,
        terminating: bool,
        compression: int,
        size: int,
        max_bytes: int,
        now_ms: int,
    ) -> tuple[ClientInstance | None, int]:
        """PushTelemetry's checks: the client's instance and the error (0: export the metrics)."""
        if instance_id == bytes(16):
            return None, int(ErrorCode.INVALID_REQUEST)
        found = self.instance(instance_id, attributes)
        error = self._check_push(
            found, pushed_subscription, terminating, compression, size, max_bytes, now_ms
        )
        found.terminating = terminating
        found.last_error = error
        return found, error

    @staticmethod
    def _check_push(
        found: ClientInstance,
        pushed_subscription: int,
        terminating: bool,
        compression: int,
        size: int,
        max_bytes: int,
        now_ms: int,
    ) -> int:
        if found.terminating:
            return int(ErrorCode.INVALID_REQUEST)
        accepted = (
            found.last_get_ms > found.last_push_ms or now_ms - found.last_push_ms >= found.push_interval_ms
        )
        if not accepted and not terminating:
            return int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        if accepted:
            found.last_push_ms = now_ms
        if pushed_subscription != found.subscription_id:
            return int(ErrorCode.UNKNOWN_SUBSCRIPTION_ID)
        if compression not in _KNOWN_COMPRESSION:
            return int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        if size > max_bytes:
            return int(ErrorCode.TELEMETRY_TOO_LARGE)
        return 0


_RETRY_AT_ONCE = frozenset(
    {int(ErrorCode.UNKNOWN_SUBSCRIPTION_ID), int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)}
)
