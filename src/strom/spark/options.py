"""Option parsing and validation for the `strom` data source, with the semantics of Spark's Kafka connector.

Theory of operation
-------------------
Spark hands a Python data source its options as a case-insensitive map whose keys arrive lower-cased and
whose values are strings (`False` becomes `"false"`). This module turns that map into two frozen,
picklable value objects -- `SourceOptions` for reads and `SinkOptions` for writes -- and rejects anything
Spark's Kafka connector rejects, with an error that names the option, so a job moved from format `kafka`
to format `strom` fails (or works) the same way.

Nothing here talks to a broker or imports pyspark: these are pure functions, unit-tested without a JVM.

Offsets are written as Spark's Kafka connector writes them: `{"topic": {"partition": offset}}` with the
partition number as a JSON string key. In `startingOffsets`/`endingOffsets`, `-2` means earliest and `-1`
latest; `startingOffsetsByTimestamp`/`endingOffsetsByTimestamp` hold epoch milliseconds in the same shape.

Client configuration: every option starting with `kafka.` is passed, without the prefix, to the
confluent-kafka (librdkafka) clients, after Java client settings are translated (`java_options`),
except the Java-client settings that Spark's connector also forbids
because the connector owns them (deserializers, auto offset reset, auto commit, interceptors, and on the
sink the transactional id).

Isolation: `kafka.isolation.level` is honoured as in Spark's Kafka source, but the default is
`read_committed` (the Kafka consumer's own default, which Spark inherits, is `read_uncommitted`): records
of aborted and still-open transactions are never returned and "latest" is the last stable offset, so the
output of a transactional or exactly-once writer is read exactly once. `read_uncommitted` shows every
record.

Delivery guarantee (sink): `deliveryGuarantee` is `exactly-once` (the default for streaming writes; one
Kafka transaction per micro-batch and Spark partition, see `strom.spark.transactional`) or
`at-least-once` (plain idempotent writes; the only choice for batch `df.write`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from strom.spark.errors import KafkaOptionError
from strom.spark.java_options import translate
from strom.spark.option_values import option_bool, option_duration_ms, option_non_negative, option_positive
from strom.spark.progress import progress_group

EARLIEST = -2
LATEST = -1

TopicPartitionOffsets = dict[tuple[str, int], int]
LibrdkafkaConfig = dict[str, str | int | bool]
"""A confluent-kafka client configuration: the connector's typed defaults under the `kafka.*` options."""
OffsetsJson = dict[str, dict[str, int]]
"""A stream offset as Spark stores it in the checkpoint: `{"topic": {"partition": offset}}`."""

_EXAMPLE_OFFSETS = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_EXAMPLE_ASSIGN = '{"topicA":[0,1],"topicB":[2,4]}'


class StartingKind(Enum):
    """How an offset bound was specified; the resolved numbers come from the broker."""

    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC_OFFSETS = "specific offsets"
    TIMESTAMP = "global timestamp"
    SPECIFIC_TIMESTAMPS = "timestamps per partition"


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """One end of a read: earliest, latest, offsets per partition, or timestamps (global or per partition)."""

    kind: StartingKind
    offsets: TopicPartitionOffsets = field(default_factory=dict)
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class Subscription:
    """Exactly one of Spark's `assign`, `subscribe` and `subscribePattern`."""

    assign: tuple[tuple[str, int], ...] = ()
    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, topic: str) -> bool:
        """Whether a topic name belongs to this subscription (assign lists partitions, not topics)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.topics:
            return topic in self.topics
        return any(t == topic for t, _ in self.assign)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated read options (batch or streaming)."""

    client_config: dict[str, str]
    subscription: Subscription
    starting: OffsetBound
    ending: OffsetBound
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    timestamp_not_found_latest: bool = False
    notes: tuple[str, ...] = ()
    publish_progress: bool = False  # streaming: commit read offsets to a group (`progress`)
    progress_group: str | None = None
    progress_group_prefix: str = "strom-spark"


class DeliveryGuarantee(Enum):
    """The sink's `deliveryGuarantee` option (values as in Flink's Kafka sink)."""

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


DEFAULT_TRANSACTIONAL_ID_PREFIX = "strom-sink"


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Validated write options."""

    client_config: dict[str, str]
    topic: str | None = None
    delivery_guarantee: DeliveryGuarantee = DeliveryGuarantee.AT_LEAST_ONCE
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    notes: tuple[str, ...] = ()


# Java consumer/producer settings that Spark's connector refuses, with the reason it gives.
_FORBIDDEN_SOURCE = {
    "auto.offset.reset": "is not supported. Instead set the source option 'startingOffsets' to 'earliest' "
    "or 'latest' to specify where to start. Structured Streaming manages which offsets are consumed "
    "internally, rather than relying on the kafka Consumer to do it",
    "key.deserializer": "is not supported as keys are deserialized as byte arrays. Use DataFrame "
    "operations to explicitly deserialize the keys",
    "value.deserializer": "is not supported as values are deserialized as byte arrays. Use DataFrame "
    "operations to explicitly deserialize the values",
    "enable.auto.commit": "is not supported: offsets are tracked in Spark's checkpoint, not committed "
    "to Kafka",
    "interceptor.classes": "is not supported as returning non-byte-array records would break the source",
}
_FORBIDDEN_SINK = {
    "key.serializer": "is not supported as keys are serialized as byte arrays. Use DataFrame operations "
    "to explicitly serialize the keys into either strings or byte arrays",
    "value.serializer": "is not supported as values are serialized as byte arrays. Use DataFrame "
    "operations to explicitly serialize the values into either strings or byte arrays",
    "transactional.id": "is not supported: the exactly-once sink derives one transactional id per "
    "query and Spark partition (option 'transactionalIdPrefix' sets its prefix)",
}
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")


def client_config(options: Mapping[str, str], forbidden: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options without their prefix, after rejecting the forbidden ones.

    Raises:
        KafkaOptionError: `kafka.bootstrap.servers` is missing or a forbidden option is present.
    """
    config = {k[len("kafka.") :]: str(v) for k, v in options.items() if k.lower().startswith("kafka.")}
    for key in config:
        if key.lower() in forbidden:
            raise KafkaOptionError(f"Kafka option '{key}' {forbidden[key.lower()]}.")
    if not config.get("bootstrap.servers"):
        raise KafkaOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
        )
    return config


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    """Exactly one of `assign`, `subscribe`, `subscribePattern`, parsed and checked."""
    given = [k for k in ("assign", "subscribe", "subscribepattern") if k in options]
    if not given:
        raise KafkaOptionError(
            "One of the following options must be specified for Kafka source: subscribe, "
            "subscribePattern, assign. See the docs for more details."
        )
    if len(given) > 1:
        raise KafkaOptionError(
            "Only one of the following options can be specified for Kafka source: subscribe, "
            "subscribePattern, assign. See the docs for more details."
        )
    value = str(options[given[0]]).strip()
    if given[0] == "assign":
        return Subscription(assign=parse_assign(value))
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise KafkaOptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
        return Subscription(topics=topics)
    if not value:
        raise KafkaOptionError(
            f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'"
        )
    try:
        re.compile(value)
    except re.error as e:
        raise KafkaOptionError(f"Invalid value '{value}' for option 'subscribePattern': {e}") from e
    return Subscription(pattern=value)


def parse_assign(text: str) -> tuple[tuple[str, int], ...]:
    """`{"topicA":[0,1],"topicB":[2,4]}` as sorted (topic, partition) pairs."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        pairs = sorted(
            (str(topic), _as_int(p)) for topic, partitions in data.items() for p in _as_list(partitions)
        )
    except (ValueError, TypeError) as e:
        raise KafkaOptionError(f"Expected e.g. {_EXAMPLE_ASSIGN}, got {text}") from e
    if not pairs:
        raise KafkaOptionError(
            f"No topicpartitions to assign as specified value for option 'assign' is '{text}'"
        )
    return tuple(pairs)


def parse_partition_offsets(text: str) -> TopicPartitionOffsets:
    """`{"topic": {"partition": number}}` (offsets or timestamps) as a flat {(topic, partition): number}.

    Raises:
        KafkaOptionError: the text is not JSON of that shape.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        result: TopicPartitionOffsets = {}
        for topic, partitions in data.items():
            if not isinstance(partitions, dict):
                raise TypeError("partitions must be an object")
            for partition, offset in partitions.items():
                result[(str(topic), _as_int(partition))] = _as_int(offset)
    except (ValueError, TypeError) as e:
        raise KafkaOptionError(f"Expected e.g. {_EXAMPLE_OFFSETS}, got {text}") from e
    return result


def offsets_to_json(offsets: TopicPartitionOffsets) -> OffsetsJson:
    """The checkpoint form of offsets: topics and partitions sorted, partitions as string keys."""
    result: OffsetsJson = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> TopicPartitionOffsets:
    """Inverse of `offsets_to_json` (what Spark hands back from the checkpoint)."""
    return {
        (str(topic), int(partition)): int(offset)
        for topic, partitions in data.items()
        for partition, offset in partitions.items()
    }


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate read options exactly once, on the driver.

    Args:
        options: Spark's options (keys in any case; lower-cased here).
        streaming: True for `readStream`, False for `read`.

    Raises:
        KafkaOptionError: any option Spark's Kafka source would reject.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    config, notes = translate(client_config(opts, _FORBIDDEN_SOURCE))
    config["isolation.level"] = _isolation_level(config)
    publish, group, prefix, ignored = progress_group(opts, config, streaming=streaming)
    subscription = parse_subscription(opts)
    if streaming:
        for key in _BATCH_ONLY:
            if key in opts:
                raise KafkaOptionError(f"Option '{key}' is not valid in streaming queries")
    starting = _parse_bound(opts, "starting", EARLIEST if not streaming else LATEST)
    ending = _parse_bound(opts, "ending", LATEST)
    if not streaming:
        _check_batch_bounds(starting, ending)
    return SourceOptions(
        client_config=config,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=option_bool(opts, "failondataloss", True),
        include_headers=option_bool(opts, "includeheaders", False),
        min_partitions=option_positive(opts, "minpartitions"),
        max_records_per_partition=option_positive(opts, "maxrecordsperpartition"),
        max_offsets_per_trigger=option_positive(opts, "maxoffsetspertrigger"),
        min_offsets_per_trigger=option_positive(opts, "minoffsetspertrigger"),
        max_trigger_delay_ms=option_duration_ms(opts, "maxtriggerdelay", 15 * 60 * 1000),
        poll_timeout_ms=option_positive(opts, "kafkaconsumer.polltimeoutms") or 120_000,
        fetch_offset_num_retries=option_non_negative(opts, "fetchoffset.numretries", 3),
        fetch_offset_retry_interval_ms=option_non_negative(opts, "fetchoffset.retryintervalms", 10),
        timestamp_not_found_latest=_timestamp_strategy(opts),
        notes=(*notes, *ignored),
        publish_progress=publish,
        progress_group=group,
        progress_group_prefix=prefix,
    )


def parse_sink_options(options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
    """Validate write options.

    Args:
        options: Spark's options (keys in any case; lower-cased here).
        streaming: True for `writeStream` (exactly-once by default), False for `write`.

    Raises:
        KafkaOptionError: missing bootstrap servers, a forbidden option, an unknown delivery
            guarantee, or exactly-once asked of a batch write.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    config, notes = translate(client_config(opts, _FORBIDDEN_SINK))
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise KafkaOptionError("Option 'topic' must not be empty")
    guarantee = _delivery_guarantee(opts, streaming)
    prefix = opts.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if not prefix:
        raise KafkaOptionError("Option 'transactionalIdPrefix' must not be empty")
    if (
        guarantee is DeliveryGuarantee.EXACTLY_ONCE
        and config.get("enable.idempotence", "").lower() == "false"
    ):
        raise KafkaOptionError(
            "Kafka option 'enable.idempotence' cannot be false with deliveryGuarantee 'exactly-once'."
        )
    return SinkOptions(
        client_config=config,
        topic=topic.strip() if topic else None,
        delivery_guarantee=guarantee,
        transactional_id_prefix=prefix,
        notes=tuple(notes),
    )


def _delivery_guarantee(opts: Mapping[str, str], streaming: bool) -> DeliveryGuarantee:
    default = DeliveryGuarantee.EXACTLY_ONCE if streaming else DeliveryGuarantee.AT_LEAST_ONCE
    value = opts.get("deliveryguarantee", default.value).strip().lower()
    try:
        guarantee = DeliveryGuarantee(value)
    except ValueError:
        raise KafkaOptionError(
            f"Invalid value '{value}' for option 'deliveryGuarantee', must be 'exactly-once' or "
            "'at-least-once'"
        ) from None
    if guarantee is DeliveryGuarantee.EXACTLY_ONCE and not streaming:
        raise KafkaOptionError(
            "deliveryGuarantee 'exactly-once' is for streaming writes (writeStream); batch writes are "
            "at-least-once"
        )
    return guarantee


def _isolation_level(config: Mapping[str, str]) -> str:
    """`kafka.isolation.level`, read_committed unless said otherwise."""
    value = config.get("isolation.level", "read_committed").strip().lower()
    if value not in _ISOLATION_LEVELS:
        raise KafkaOptionError(
            f"Invalid value '{value}' for Kafka option 'isolation.level', must be read_committed or "
            "read_uncommitted"
        )
    return value


def _parse_bound(opts: Mapping[str, str], prefix: str, default: int) -> OffsetBound:
    # Precedence as in Spark: global timestamp, then timestamps per partition, then offsets.
    if f"{prefix}timestamp" in opts:
        ts = _as_timestamp(opts[f"{prefix}timestamp"], f"{prefix}Timestamp")
        return OffsetBound(StartingKind.TIMESTAMP, timestamp_ms=ts)
    if f"{prefix}offsetsbytimestamp" in opts:
        offsets = parse_partition_offsets(opts[f"{prefix}offsetsbytimestamp"])
        return OffsetBound(StartingKind.SPECIFIC_TIMESTAMPS, offsets)
    text = opts.get(f"{prefix}offsets", "").strip()
    if not text:
        return OffsetBound(StartingKind.EARLIEST if default == EARLIEST else StartingKind.LATEST)
    if text.lower() in ("earliest", "latest"):
        return OffsetBound(StartingKind(text.lower()))
    offsets = parse_partition_offsets(text)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise KafkaOptionError(
                f"Invalid offset {offset} for {tp[0]}-{tp[1]} in option '{prefix}Offsets': "
                "use -2 for earliest, -1 for latest or an offset >= 0"
            )
    return OffsetBound(StartingKind.SPECIFIC_OFFSETS, offsets)


def _check_batch_bounds(starting: OffsetBound, ending: OffsetBound) -> None:
    if starting.kind is StartingKind.LATEST:
        raise KafkaOptionError("starting offset can't be latest for batch queries on Kafka")
    if ending.kind is StartingKind.EARLIEST:
        raise KafkaOptionError("ending offset can't be earliest for batch queries on Kafka")
    if starting.kind is StartingKind.SPECIFIC_OFFSETS:
        for (topic, partition), offset in starting.offsets.items():
            if offset == LATEST:
                raise KafkaOptionError(
                    f"startingOffsets for {topic}-{partition} can't be latest for batch queries on Kafka"
                )
    if ending.kind is StartingKind.SPECIFIC_OFFSETS:
        for (topic, partition), offset in ending.offsets.items():
            if offset == EARLIEST:
                raise KafkaOptionError(
                    f"ending offset for {topic}-{partition} can't be earliest for batch queries on Kafka"
                )


def _timestamp_strategy(opts: Mapping[str, str]) -> bool:
    value = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if value not in ("error", "latest"):
        raise KafkaOptionError(
            f"Invalid value '{value}' for option 'startingOffsetsByTimestampStrategy', "
            "must be 'error' or 'latest'"
        )
    return value == "latest"


def _as_timestamp(value: str, name: str) -> int:
    try:
        ts = int(value.strip())
    except ValueError:
        ts = -1
    if ts < 0:
        raise KafkaOptionError(f"Invalid value '{value}' for option '{name}', must be epoch milliseconds")
    return ts


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        raise TypeError("boolean is not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    raise TypeError(f"not an integer: {value!r}")


def _as_list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise TypeError("partitions must be a list")
    return value
