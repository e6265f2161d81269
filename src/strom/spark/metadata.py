"""Driver-side broker queries for the `strom` source: which partitions exist, and their offsets.

Theory of operation
-------------------
The driver never reads records. It asks the brokers, through one lazily created confluent-kafka
`AdminClient`, for the topic partitions a subscription covers (`list_topics`) and for three kinds of
offsets per partition (`list_offsets`): the log start offset (`OffsetSpec.earliest`), the high watermark
(`OffsetSpec.latest`, or the last stable offset under `isolation.level=read_committed`) and the first
offset whose timestamp is at or after a given time (`OffsetSpec.for_timestamp`, -1 when there is none).
Failed lookups are retried `fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart, as Spark's
connector does.

`resolve_bound` turns an `OffsetBound` (earliest / latest / per-partition offsets / timestamps) into
concrete offsets for a set of partitions. As in Spark, per-partition JSON must name exactly the partitions
being read, with -2 for earliest and -1 for latest.

Threading: one `KafkaMetadata` per driver-side reader; not thread-safe. The AdminClient is created on
first use and dropped when the owner is pickled (`__getstate__`), so no socket ever crosses a pickle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from strom.spark.errors import KafkaOptionError
from strom.spark.options import (
    EARLIEST,
    LATEST,
    OffsetBound,
    StartingKind,
    Subscription,
    TopicPartitionOffsets,
)

# Kafka's internal topics (its Topic.isInternal), which a pattern subscription never matches.
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_REQUEST_TIMEOUT_S = 30.0
T = TypeVar("T")


class KafkaMetadata:
    """Partition discovery and offset lookups through a lazily opened AdminClient."""

    def __init__(self, client_config: dict[str, str], num_retries: int = 3, retry_interval_ms: int = 1000):
        self._config = dict(client_config)
        self._num_retries = num_retries
        self._retry_interval_ms = retry_interval_ms
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    def _client(self) -> AdminClient:
        if self._admin is None:
            admin_config: dict[str, str | int | float | bool] = {
                k: v for k, v in self._config.items() if k != "isolation.level"
            }
            self._admin = AdminClient(admin_config)
        return self._admin

    def close(self) -> None:
        """Drop the AdminClient (confluent-kafka closes it when collected)."""
        self._admin = None

    def topic_partitions(self, subscription: Subscription) -> set[tuple[str, int]]:
        """The partitions a subscription covers now (assign: exactly the listed ones)."""
        if subscription.assign:
            return set(subscription.assign)
        metadata = self._retry(lambda: self._client().list_topics(timeout=_REQUEST_TIMEOUT_S))
        result: set[tuple[str, int]] = set()
        for name, topic in metadata.topics.items():
            if name in _INTERNAL_TOPICS or topic.error is not None or not subscription.matches(name):
                continue
            result.update((name, p) for p in topic.partitions)
        return result

    def earliest(self, partitions: Iterable[tuple[str, int]]) -> TopicPartitionOffsets:
        """Log start offset of each partition; partitions that no longer exist are left out."""
        return self._list_offsets(partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[tuple[str, int]]) -> TopicPartitionOffsets:
        """High watermark (or last stable offset under read_committed) of each partition."""
        return self._list_offsets(partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    def for_timestamp(
        self, partitions: Iterable[tuple[str, int]], timestamp_ms: int
    ) -> TopicPartitionOffsets:
        """First offset with timestamp >= `timestamp_ms`, or -1 where there is none."""
        return self._list_offsets(partitions, OffsetSpec.for_timestamp(timestamp_ms))

    def resolve_bound(
        self, bound: OffsetBound, partitions: set[tuple[str, int]], *, starting: bool, not_found_latest: bool
    ) -> TopicPartitionOffsets:
        """Concrete offsets for `partitions` as described by `bound`.

        Args:
            bound: the parsed starting or ending option.
            partitions: the partitions being read.
            starting: True for a start bound (a missing timestamp match is an error unless
                `not_found_latest`), False for an end bound (a missing match means latest).
            not_found_latest: `startingOffsetsByTimestampStrategy=latest`.

        Raises:
            KafkaOptionError: per-partition JSON names other partitions than those being read, or no
                offset matches a starting timestamp.
        """
        if bound.kind is StartingKind.EARLIEST:
            return self.earliest(partitions)
        if bound.kind is StartingKind.LATEST:
            return self.latest(partitions)
        if bound.kind is StartingKind.SPECIFIC_OFFSETS:
            _check_same_partitions(bound.offsets, partitions, "offsets")
            return self._specific_offsets(bound.offsets)
        if bound.kind is StartingKind.TIMESTAMP:
            found = self.for_timestamp(partitions, bound.timestamp_ms)
        else:
            _check_same_partitions(bound.offsets, partitions, "timestamps")
            found = {}
            for ts in sorted(set(bound.offsets.values())):
                same_ts = [tp for tp, t in bound.offsets.items() if t == ts]
                found.update(self.for_timestamp(same_ts, ts))
        return self._fill_not_found(found, starting=starting, not_found_latest=not_found_latest)

    def _fill_not_found(
        self, found: TopicPartitionOffsets, *, starting: bool, not_found_latest: bool
    ) -> TopicPartitionOffsets:
        missing = [tp for tp, offset in found.items() if offset < 0]
        if missing and starting and not not_found_latest:
            names = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
            raise KafkaOptionError(
                f"No offset matched the starting timestamp for partitions {names}. Set "
                "'startingOffsetsByTimestampStrategy' to 'latest' to start from the latest offset instead."
            )
        if missing:
            found.update(self.latest(missing))
        return found

    def _specific_offsets(self, offsets: TopicPartitionOffsets) -> TopicPartitionOffsets:
        result = {tp: o for tp, o in offsets.items() if o >= 0}
        result.update(self.earliest([tp for tp, o in offsets.items() if o == EARLIEST]))
        result.update(self.latest([tp for tp, o in offsets.items() if o == LATEST]))
        return result

    def _list_offsets(self, partitions: Iterable[tuple[str, int]], spec: OffsetSpec) -> TopicPartitionOffsets:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        return self._retry(lambda: self._list_offsets_once(wanted, spec))

    def _list_offsets_once(self, wanted: list[tuple[str, int]], spec: OffsetSpec) -> TopicPartitionOffsets:
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._config.get("isolation.level", "read_uncommitted") == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        request = {TopicPartition(t, p): spec for t, p in wanted}
        futures = self._client().list_offsets(
            request, isolation_level=isolation, request_timeout=_REQUEST_TIMEOUT_S
        )
        result: TopicPartitionOffsets = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = int(future.result().offset)
            except KafkaException as e:
                if _is_unknown_partition(e):
                    continue  # deleted: callers treat a missing partition as gone
                raise
        return result

    def _retry(self, call: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return call()
            except KafkaException:
                attempt += 1
                if attempt > self._num_retries:
                    raise
                time.sleep(self._retry_interval_ms / 1000)


def _is_unknown_partition(e: KafkaException) -> bool:
    error = e.args[0] if e.args else None
    name = error.name() if isinstance(error, KafkaError) else ""
    return name in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC")


def _check_same_partitions(given: TopicPartitionOffsets, partitions: set[tuple[str, int]], what: str) -> None:
    if set(given) != partitions:
        specified = ", ".join(f"{t}-{p}" for t, p in sorted(given))
        assigned = ", ".join(f"{t}-{p}" for t, p in sorted(partitions))
        raise KafkaOptionError(
            f"If the {what} are specified per partition, you must specify all TopicPartitions "
            f"(use -1 for latest, -2 for earliest). Specified: {specified}. Assigned: {assigned}"
        )
