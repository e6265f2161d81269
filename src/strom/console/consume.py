"""``strom consume``: print a topic's records to a byte stream (normally stdout).

Theory of operation:

* Without a group the consumer *assigns* the partitions itself (all of the topic's, or the one given)
  with their start offsets, so no group coordinator is involved and nothing is committed. The start
  offset per partition is the log end offset (default: only new records), the log start offset
  (``from_beginning``), a fixed offset, or the first offset whose timestamp is at or after a given time
  (ListOffsets by timestamp through ``offsets_for_times``; a partition with no such record starts at its
  log end offset, as Kafka's tools do).
* With a group the consumer *subscribes*, the group's committed offsets decide where to start
  (``from_beginning`` only sets ``auto.offset.reset=earliest`` for partitions without a commit) and
  offsets are auto-committed. Fixed offsets and timestamps do not combine with a group: use
  ``strom groups reset-offsets`` to move a group. librdkafka retries a coordinator that never
  answers forever and silently, so a consumer that has not joined its group within the request
  timeout fails with an error instead of printing nothing.
* It stops after ``max_messages`` records, after ``idle_timeout_s`` seconds without a record, when
  every partition has reached its end (``exit_at_end``), or on Ctrl-C; without any of these it runs
  until interrupted, like ``kafka-console-consumer``.

Output is one line per record, the value's bytes unchanged followed by ``\\n``. Optional fields precede
the value, tab-separated, in Kafka's console-consumer notation: ``CreateTime:<ms>``,
``Partition:<p>\\tOffset:<o>``, headers as ``k:v,k2:v2`` (``NO_HEADERS`` when none), then the key. A
null key or value prints as ``null``, as in Kafka.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from strom.console.clients import (
    LIBRDKAFKA_LOGGER,
    ClientOptions,
    ConfigValue,
    describe_kafka_error,
    fail,
    kafka_error_text,
)
from strom.console.errors import ConsoleError
from strom.console.progress import Progress, progress

_BATCH_SIZE = 500
_POLL_S = 0.5


class StartFrom(enum.Enum):
    """Where an assigned (group-less) partition starts."""

    LATEST = "latest"
    BEGINNING = "beginning"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    """What ``strom consume`` was asked to do.

    Attributes:
        topic: the topic to read.
        start: the start position kind; ``start_value`` carries the offset or timestamp (ms).
        partition: read only this partition (group-less mode only).
        max_messages: stop after this many records.
        idle_timeout_s: stop after this long without a record.
        exit_at_end: stop once every partition has been read up to its end.
        group: consumer group id; ``None`` means assign + seek without a group.
        print_key / print_headers / print_offset / print_timestamp: extra output fields.
        properties: extra librdkafka consumer properties, applied last.
    """

    topic: str
    start: StartFrom = StartFrom.LATEST
    start_value: int | None = None
    partition: int | None = None
    max_messages: int | None = None
    idle_timeout_s: float | None = None
    exit_at_end: bool = False
    group: str | None = None
    print_key: bool = False
    print_headers: bool = False
    print_offset: bool = False
    print_timestamp: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        """Reject combinations that have no meaning.

        Raises:
            ConsoleError: a fixed position or partition was combined with a group.
        """
        if self.group is None:
            return
        if self.start in (StartFrom.OFFSET, StartFrom.TIMESTAMP):
            raise ConsoleError(
                f"--{self.start.value} cannot be used with --group: the group's committed offsets decide "
                "where it starts (use 'strom groups reset-offsets')"
            )
        if self.partition is not None:
            raise ConsoleError("--partition cannot be used with --group: the group assigns partitions")


def consume(options: ClientOptions, settings: ConsumeSettings, sink: BinaryIO) -> int:
    """Consume and print records until a stop condition; return how many were printed.

    Raises:
        ConsoleError: unknown topic/partition, invalid position, or a consumer error.
    """
    settings.validate()
    consumer = _make_consumer(options, settings)
    try:
        loop = _ConsumeLoop(consumer, settings, sink)
        if settings.group is None:
            consumer.assign(_start_positions(consumer, options, settings))
        else:
            _require_topic(consumer, options, settings.topic)
            consumer.subscribe([settings.topic], on_assign=loop.on_assign)
            loop.join_deadline = time.monotonic() + options.timeout_s
        total = settings.max_messages
        with progress(f"Consuming {settings.topic}", total, "records") as bar:
            loop.bar = bar
            return loop.run()
    finally:
        # close() leaves the group cleanly and makes the final auto-commit.
        consumer.close()


def format_record(msg: Message, settings: ConsumeSettings) -> bytes:
    """Render one record as an output line (see the module docstring)."""
    fields: list[bytes] = []
    if settings.print_timestamp:
        fields.append(_timestamp_field(msg))
    if settings.print_offset:
        fields.append(f"Partition:{msg.partition()}\tOffset:{msg.offset()}".encode())
    if settings.print_headers:
        fields.append(_headers_field(msg.headers()))
    if settings.print_key:
        fields.append(_nullable(msg.key()))
    fields.append(_nullable(msg.value()))
    return b"\t".join(fields) + b"\n"


class _ConsumeLoop:
    """The poll loop and its stop conditions (one instance per run, not thread-safe)."""

    def __init__(self, consumer: Consumer, settings: ConsumeSettings, sink: BinaryIO) -> None:
        self._consumer = consumer
        self._settings = settings
        self._sink = sink
        self._printed = 0
        self._at_end: set[int] = set()
        self._last_record = time.monotonic()
        #: With a group: when to give up waiting for the first assignment (None = joined / no group).
        self.join_deadline: float | None = None
        self.bar: Progress | None = None

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Rebalance callback: any assignment, even an empty one, proves the group was joined."""
        if self.join_deadline is not None:
            # The idle timeout counts from joining: time spent rebalancing is not "no records".
            self._last_record = time.monotonic()
        self.join_deadline = None

    def run(self) -> int:
        try:
            while not self._done():
                self._poll_once()
        except KeyboardInterrupt:
            # Ctrl-C is the normal way to stop an open-ended consume, not an error.
            pass
        return self._printed

    def _done(self) -> bool:
        if self.join_deadline is not None:
            if time.monotonic() > self.join_deadline:
                raise ConsoleError(
                    f"could not join group {self._settings.group!r} in time "
                    "(no answer from its coordinator; does the broker support consumer groups?)"
                )
            return False
        limit = self._settings.max_messages
        if limit is not None and self._printed >= limit:
            return True
        idle = self._settings.idle_timeout_s
        if idle is not None and time.monotonic() - self._last_record >= idle:
            return True
        return self._settings.exit_at_end and self._all_at_end()

    def _all_at_end(self) -> bool:
        assigned = {tp.partition for tp in self._consumer.assignment()}
        return bool(assigned) and assigned <= self._at_end

    def _poll_once(self) -> None:
        wanted = _BATCH_SIZE
        if self._settings.max_messages is not None:
            # Never fetch past the limit: with a group, records handed out count as consumed
            # (their offsets are stored for the auto-commit) even if they were not printed.
            wanted = min(wanted, self._settings.max_messages - self._printed)
        messages = self._consumer.consume(num_messages=wanted, timeout=self._poll_timeout())
        for msg in messages:
            self._handle(msg)
        self._sink.flush()

    def _poll_timeout(self) -> float:
        idle = self._settings.idle_timeout_s
        if idle is None or self.join_deadline is not None:
            return _POLL_S
        remaining = idle - (time.monotonic() - self._last_record)
        return max(0.0, min(_POLL_S, remaining))

    def _handle(self, msg: Message) -> None:
        err = msg.error()
        if err is None:
            self._sink.write(format_record(msg, self._settings))
            self._printed += 1
            if self.bar is not None:
                self.bar.advance()
            self._last_record = time.monotonic()
            self._at_end.discard(msg.partition() or 0)
        elif err.code() == KafkaError._PARTITION_EOF:
            self._at_end.add(msg.partition() or 0)
        else:
            raise ConsoleError(f"cannot consume {msg.topic()} [{msg.partition()}]: {kafka_error_text(err)}")


def _make_consumer(options: ClientOptions, settings: ConsumeSettings) -> Consumer:
    overrides: dict[str, ConfigValue] = {"enable.partition.eof": settings.exit_at_end}
    if settings.group is None:
        # librdkafka insists on a group.id even for assign(); a private one that is never
        # committed to keeps the console out of every real group.
        overrides.update({"group.id": f"strom-console-{os.getpid()}", "enable.auto.commit": False})
        if settings.start is StartFrom.OFFSET:
            # An explicit offset outside the log is reported, not silently replaced.
            overrides["auto.offset.reset"] = "error"
    else:
        overrides["group.id"] = settings.group
        overrides["auto.offset.reset"] = "earliest" if settings.start is StartFrom.BEGINNING else "latest"
    conf = options.config(**overrides)
    conf.update(settings.properties)
    try:
        return Consumer(conf, logger=LIBRDKAFKA_LOGGER)
    except (KafkaException, ValueError) as exc:
        raise ConsoleError(f"invalid consumer configuration: {exc}") from None


def _require_topic(consumer: Consumer, options: ClientOptions, topic_name: str) -> list[int]:
    """Return the topic's partition ids; raise ConsoleError when the broker does not know it."""
    try:
        metadata = consumer.list_topics(topic_name, timeout=options.timeout_s)
    except KafkaException as exc:
        raise fail("cannot fetch metadata", exc, options) from None
    topic = metadata.topics.get(topic_name)
    if topic is None or (topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        raise ConsoleError(f"topic {topic_name!r} does not exist")
    if topic.error is not None:
        raise ConsoleError(f"topic {topic_name!r}: {kafka_error_text(topic.error)}")
    return sorted(topic.partitions)


def _start_positions(
    consumer: Consumer, options: ClientOptions, settings: ConsumeSettings
) -> list[TopicPartition]:
    partitions = _require_topic(consumer, options, settings.topic)
    if settings.partition is not None:
        if settings.partition not in partitions:
            raise ConsoleError(
                f"topic {settings.topic!r} has no partition {settings.partition} (it has {len(partitions)})"
            )
        partitions = [settings.partition]
    if settings.start is StartFrom.TIMESTAMP:
        return _offsets_for_time(consumer, options, settings, partitions)
    offset = {
        StartFrom.LATEST: OFFSET_END,
        StartFrom.BEGINNING: OFFSET_BEGINNING,
        StartFrom.OFFSET: settings.start_value or 0,
    }[settings.start]
    return [TopicPartition(settings.topic, p, offset) for p in partitions]


def _offsets_for_time(
    consumer: Consumer, options: ClientOptions, settings: ConsumeSettings, partitions: Iterable[int]
) -> list[TopicPartition]:
    query = [TopicPartition(settings.topic, p, settings.start_value or 0) for p in partitions]
    try:
        found = consumer.offsets_for_times(query, timeout=options.timeout_s)
    except KafkaException as exc:
        raise fail("cannot look up offsets by timestamp", exc, options) from None
    positions = []
    for tp in found:
        if tp.error is not None:
            raise ConsoleError(
                f"cannot look up offset by timestamp for partition {tp.partition}: "
                f"{describe_kafka_error(tp.error)}"
            )
        # -1: no record at or after the timestamp, so only future records qualify.
        positions.append(TopicPartition(tp.topic, tp.partition, OFFSET_END if tp.offset < 0 else tp.offset))
    return positions


def _timestamp_field(msg: Message) -> bytes:
    kind, millis = msg.timestamp()
    if kind == TIMESTAMP_CREATE_TIME:
        return f"CreateTime:{millis}".encode()
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return f"LogAppendTime:{millis}".encode()
    return b"NO_TIMESTAMP"


def _headers_field(headers: Any) -> bytes:
    if not headers:
        return b"NO_HEADERS"
    pairs = headers.items() if isinstance(headers, dict) else headers
    return b",".join(name.encode() + b":" + _nullable(value) for name, value in pairs)


def _nullable(data: bytes | str | None) -> bytes:
    if data is None:
        return b"null"
    return data.encode() if isinstance(data, str) else data
