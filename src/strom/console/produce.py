"""``strom produce``: send the lines of a byte stream (normally stdin) to a topic.

Theory of operation:

* Input is read as bytes, never decoded, so any payload survives byte-for-byte. Each record is one line
  without its terminating ``\\n``; a final line without ``\\n`` is a record too. Nothing else is
  stripped (a ``\\r`` from a Windows file stays in the value).
* With a key separator, a line is split at the *first* occurrence: ``key SEP value``. A non-empty line
  without the separator is an error (as in Kafka's console producer with ``parse.key=true``); the
  records read before it are still flushed.
* Empty lines are skipped by default, because a trailing blank line in a file is almost never meant as
  a record. ``keep_empty_lines`` sends each one as a record with an empty value and no key.
* The producer uses ``partitioner=murmur2_random``: librdkafka's default (``consistent_random``,
  CRC32) would place keyed records in different partitions than Java clients, Kafka Streams and
  kafka-python do, silently breaking per-key ordering for mixed-client topics.
* At end of input the producer is flushed; every delivery failure is counted and the first one
  reported. Delivery is bounded by ``message.timeout.ms`` (the global ``--timeout-s`` by default).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Required, TypedDict

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from strom.console.clients import (
    LIBRDKAFKA_LOGGER,
    ClientConfig,
    ClientOptions,
    describe_kafka_error,
    fail,
    kafka_error_text,
)
from strom.console.errors import ConsoleError
from strom.console.progress import Progress, progress

#: librdkafka properties chosen by ``strom produce`` itself; ``--property`` overrides them.
PRODUCER_DEFAULTS: Mapping[str, str] = {"partitioner": "murmur2_random"}

# Leave room over message.timeout.ms so that flush() normally returns because every message has
# either been delivered or failed, not because flush gave up first.
_FLUSH_MARGIN_S = 5.0


@dataclass(frozen=True, slots=True)
class ProduceSettings:
    """What ``strom produce`` was asked to do.

    Attributes:
        topic: the destination topic.
        key_separator: split each line into key and value at its first occurrence; ``None`` = no keys.
        headers: (name, value) pairs attached to every record.
        partition: fixed destination partition; ``None`` lets the partitioner choose.
        acks: ``"0"``, ``"1"`` or ``"all"``; ``None`` keeps librdkafka's default (all).
        compression: ``compression.type``; ``None`` keeps librdkafka's default (none).
        properties: extra librdkafka producer properties (``--property``), applied last.
        keep_empty_lines: send empty lines as empty records instead of skipping them.
    """

    topic: str
    key_separator: bytes | None = None
    headers: Sequence[tuple[str, bytes]] = ()
    partition: int | None = None
    acks: str | None = None
    compression: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    keep_empty_lines: bool = False


@dataclass(slots=True)
class _DeliveryReport:
    """Outcome of the delivery callbacks (run on this thread inside poll/flush)."""

    delivered: int = 0
    failed: int = 0
    first_error: str | None = None

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = f"{kafka_error_text(err)} (partition {msg.partition()})"


def producer_config(options: ClientOptions, settings: ProduceSettings) -> ClientConfig:
    """librdkafka producer configuration: Strom's defaults, then flags, then ``--property``."""
    conf = options.config(**PRODUCER_DEFAULTS, **{"message.timeout.ms": int(options.timeout_s * 1000)})
    if settings.acks is not None:
        conf["acks"] = settings.acks
    if settings.compression is not None:
        conf["compression.type"] = settings.compression
    conf.update(settings.properties)
    return conf


def parse_records(
    lines: Iterator[bytes], key_separator: bytes | None, keep_empty_lines: bool
) -> Iterator[tuple[bytes | None, bytes]]:
    """Turn input lines into (key, value) pairs, following the module docstring's rules.

    Raises:
        ConsoleError: a non-empty line lacks the key separator.
    """
    for number, raw in enumerate(lines, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if not line:
            if keep_empty_lines:
                yield None, b""
            continue
        if key_separator is None:
            yield None, line
            continue
        key, sep, value = line.partition(key_separator)
        if not sep:
            raise ConsoleError(f"input line {number} has no key separator {key_separator!r}")
        yield key, value


def produce_lines(options: ClientOptions, settings: ProduceSettings, source: BinaryIO) -> int:
    """Produce every record read from ``source``; return how many were delivered.

    Raises:
        ConsoleError: unknown topic or partition, malformed input line, or failed deliveries.
    """
    try:
        producer = Producer(producer_config(options, settings), logger=LIBRDKAFKA_LOGGER)
    except KafkaException as exc:
        raise fail("invalid producer configuration", exc, options) from None
    _check_destination(producer, options, settings)
    report = _DeliveryReport()
    sent = 0
    with progress(f"Producing to {settings.topic}", _input_size(source), "bytes") as bar:
        try:
            lines = _counted(iter(source), bar)
            for key, value in parse_records(lines, settings.key_separator, settings.keep_empty_lines):
                _send(producer, settings, key, value, report)
                sent += 1
        finally:
            # Even when input parsing stops with an error, what was already accepted is delivered.
            bar.describe(f"Flushing to {settings.topic}")
            undelivered = producer.flush(options.timeout_s + _FLUSH_MARGIN_S)
    return _check_report(report, sent, undelivered)


def _input_size(source: BinaryIO) -> int | None:
    """Bytes of a regular input file (``strom produce T < big.txt``); None for a pipe or terminal."""
    try:
        info = os.fstat(source.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _counted(lines: Iterator[bytes], bar: Progress) -> Iterator[bytes]:
    for line in lines:
        bar.advance(len(line))
        yield line


class _ProduceArgs(TypedDict, total=False):
    """``Producer.produce`` keyword arguments; headers and partition only when the user gave them."""

    key: Required[bytes | None]
    on_delivery: Required[Callable[[KafkaError | None, Message], None]]
    headers: list[tuple[str, str | bytes | None]]
    partition: int


def _send(
    producer: Producer, settings: ProduceSettings, key: bytes | None, value: bytes, report: _DeliveryReport
) -> None:
    kwargs: _ProduceArgs = {"key": key, "on_delivery": report.on_delivery}
    if settings.headers:
        kwargs["headers"] = list(settings.headers)
    if settings.partition is not None:
        kwargs["partition"] = settings.partition
    while True:
        try:
            producer.produce(settings.topic, value, **kwargs)
        except BufferError:
            # librdkafka's local queue is full: serve delivery reports to make room, then retry.
            producer.poll(0.1)
            continue
        except KafkaException as exc:
            raise ConsoleError(f"cannot produce to {settings.topic!r}: {describe_kafka_error(exc)}") from None
        producer.poll(0)
        return


def _check_destination(producer: Producer, options: ClientOptions, settings: ProduceSettings) -> None:
    """Fail fast on an unknown topic or partition instead of after ``message.timeout.ms``."""
    try:
        metadata = producer.list_topics(settings.topic, timeout=options.timeout_s)
    except KafkaException as exc:
        raise fail("cannot fetch metadata", exc, options) from None
    topic = metadata.topics.get(settings.topic)
    error = None if topic is None else topic.error
    if topic is None or (error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        raise ConsoleError(f"topic {settings.topic!r} does not exist")
    if error is not None and error.code() != KafkaError.LEADER_NOT_AVAILABLE:
        # LEADER_NOT_AVAILABLE is what a broker answers while auto-creating the topic; librdkafka
        # retries by itself. Anything else is worth stopping for.
        raise ConsoleError(f"topic {settings.topic!r}: {kafka_error_text(error)}")
    if settings.partition is not None and topic.partitions and settings.partition not in topic.partitions:
        raise ConsoleError(
            f"topic {settings.topic!r} has no partition {settings.partition} (it has {len(topic.partitions)})"
        )


def _check_report(report: _DeliveryReport, sent: int, undelivered: int) -> int:
    failed = report.failed + undelivered
    if failed:
        reason = report.first_error or "no delivery report before the timeout"
        raise ConsoleError(f"{failed} of {sent} messages were not delivered: {reason}")
    return report.delivered
