"""What the fault suite sends and reads: a steady idempotent acks=all writer and a full read-back.

`Writer` is one confluent-kafka producer in a thread sending numbered payloads
(`strom.testing.fault_checker.encode_payload`) round-robin over the topic's partitions at a steady rate,
recording every acknowledgement (topic, partition, offset, payload) and counting the errors by name. A
fatal producer error (librdkafka's idempotence gives up) ends that producer session; the next one gets a
new writer id, so sequences stay unique. `read_back` reads every partition from offset 0 to its high
watermark. Every loop is bounded.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing.fault_checker import UNKNOWN_OFFSET, Record, encode_payload

PAYLOAD_BYTES = 100


class Writer:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        name: str,
        rate_per_s: float = 200.0,
        acks: str = "all",
        message_timeout_ms: int = 30000,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.name = name
        self.interval_s = 1.0 / rate_per_s
        self.acks = acks
        self.message_timeout_ms = message_timeout_ms
        self.acked: list[Record] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self.sessions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)
        self._lock = threading.Lock()
        self._fatal = False

    def _config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "acks": self.acks,
            "enable.idempotence": self.acks == "all",
            "linger.ms": 5,
            "message.timeout.ms": self.message_timeout_ms,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "socket.connection.setup.timeout.ms": 3000,
            "error_cb": self._on_error,
        }

    def start(self) -> Writer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sessions += 1
            writer_id = f"{self.name}.{self.sessions}"
            producer = Producer(self._config())
            fatal = self._session(producer, writer_id)
            # Bounded: the remaining messages are reported (acknowledged or failed) within their timeout.
            producer.flush(self.message_timeout_ms / 1000 + 5)
            if not fatal:
                return

    def _session(self, producer: Any, writer_id: str) -> bool:
        """Send until stopped; True if librdkafka raised a fatal error (start a new session)."""
        seq = 0
        next_send = time.monotonic()
        while not self._stop.is_set():
            payload = encode_payload(writer_id, seq, PAYLOAD_BYTES)
            try:
                producer.produce(
                    self.topic, value=payload, partition=seq % self.partitions, on_delivery=self._delivered
                )
                seq += 1
                self.sent += 1
            except BufferError:
                producer.poll(0.05)
                continue
            except KafkaException as exc:
                self.errors[f"produce:{exc.args[0].name()}"] += 1
                return True
            producer.poll(0)
            next_send += self.interval_s
            delay = next_send - time.monotonic()
            if delay > 0:
                producer.poll(delay)
            else:
                next_send = time.monotonic()
            if self._fatal:
                self._fatal = False
                return True
        return False

    def _on_error(self, err: Any) -> None:
        # Transient errors (a broker down) are retried by librdkafka; only fatal ones end the session.
        if err.fatal():
            self.errors[f"fatal:{err.name()}"] += 1
            self._fatal = True

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            with self._lock:
                # No offset: librdkafka's implicit acknowledgement of a timed-out request (see the checker).
                offset = msg.offset()
                offset = UNKNOWN_OFFSET if offset is None or offset < 0 else offset
                self.acked.append(Record(msg.topic(), msg.partition(), offset, bytes(msg.value())))
        else:
            self.errors[err.name()] += 1

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"writer {self.name} did not stop within {timeout_s} s")

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, partitions, rf, config={k.replace("_", "."): v for k, v in configs.items()})],
        operation_timeout=30,
    )
    for future in futures.values():
        future.result(60)


def _high_watermark(consumer: Any, topic: str, partition: int, timeout_s: float = 30.0) -> int:
    """The partition's high watermark; transient errors (a broker that has just restarted and has not
    been sent the cluster's metadata yet answers "unknown topic") are retried, bounded, as clients do."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def read_back(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> list[Record]:
    """Every record of every partition from offset 0 to the high watermark (bounded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fault-check-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {p: _high_watermark(consumer, topic, p) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        positions = dict.fromkeys(ends, 0)
        found: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read-back of {topic} incomplete after {timeout_s} s: {positions} < {ends}"
                )
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            p = msg.partition()
            if msg.offset() < ends[p]:
                found.append(Record(topic, p, msg.offset(), bytes(msg.value())))
            positions[p] = max(positions[p], msg.offset() + 1)
        return found
    finally:
        consumer.close()
