"""One small adapter per real Kafka client library, so each scenario is written once and run with all.

Every adapter talks to a real broker over TCP with the library's own public API: confluent-kafka
(librdkafka), kafka-python and aiokafka. Records go in and come out as `Rec` so results compare
byte for byte across libraries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = 0
    timestamp: int | None = None
    offset: int = -1


@dataclass
class Produced:
    partition: int
    offset: int


@dataclass
class Client(Protocol):
    name: str

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None: ...
    def produce(self, topic: str, records: Sequence[Rec], compression: str = "none") -> list[Produced]: ...
    def consume(
        self, topic: str, partition: int, start: int, count: int, timeout_s: float = 20
    ) -> list[Rec]: ...
    def offset_for_time(self, topic: str, partition: int, ts: int) -> int: ...
    def delete_records(self, topic: str, partition: int, before: int) -> int: ...
    def close(self) -> None: ...


# --- confluent-kafka --------------------------------------------------------------------------------
@dataclass
class ConfluentClient:
    bootstrap: str
    name: str = "confluent-kafka"
    #: Further producer settings, in the library's own spelling (``make_client(..., producer=...)``).
    producer_settings: dict[str, Any] = field(default_factory=dict)

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin()  # must outlive the future: a destroyed handle fails it
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs or {})]
        )
        futures[topic].result(timeout=20)

    def produce(self, topic: str, records: Sequence[Rec], compression: str = "none") -> list[Produced]:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "compression.type": compression,
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                **self.producer_settings,
            }
        )
        results: list[Produced | None] = [None] * len(records)
        errors: list[Any] = []

        def on_delivery(i: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    results[i] = Produced(msg.partition(), msg.offset())

            return cb

        for i, rec in enumerate(records):
            kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value, "on_delivery": on_delivery(i)}
            if rec.partition is not None:
                kwargs["partition"] = rec.partition
            if rec.headers:
                kwargs["headers"] = list(rec.headers)
            if rec.timestamp is not None:
                kwargs["timestamp"] = rec.timestamp
            producer.produce(topic, **kwargs)
            producer.poll(0)
        remaining = producer.flush(30)
        assert remaining == 0 and not errors, (remaining, errors)
        return [r for r in results if r is not None]

    def consume(self, topic: str, partition: int, start: int, count: int, timeout_s: float = 20) -> list[Rec]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            out: list[Rec] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                headers = tuple((k, v) for k, v in (msg.headers() or []))
                out.append(
                    Rec(msg.key(), msg.value(), headers, msg.partition(), msg.timestamp()[1], msg.offset())
                )
            return out
        finally:
            consumer.close()

    def offset_for_time(self, topic: str, partition: int, ts: int) -> int:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "unused"})
        try:
            [tp] = consumer.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=20)
            return int(tp.offset)
        finally:
            consumer.close()

    def delete_records(self, topic: str, partition: int, before: int) -> int:
        from confluent_kafka import TopicPartition

        admin = self._admin()
        futures = admin.delete_records([TopicPartition(topic, partition, before)])
        result = next(iter(futures.values())).result(timeout=20)
        return int(result.low_watermark)

    def close(self) -> None:
        pass


# --- kafka-python -----------------------------------------------------------------------------------
@dataclass
class KafkaPythonClient:
    bootstrap: str
    name: str = "kafka-python"
    producer_settings: dict[str, Any] = field(default_factory=dict)

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        finally:
            admin.close()

    def produce(self, topic: str, records: Sequence[Rec], compression: str = "none") -> list[Produced]:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            compression_type=None if compression == "none" else compression,
            linger_ms=5,
            **self.producer_settings,
        )
        try:
            futures = [
                producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    headers=list(r.headers) or None,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                )
                for r in records
            ]
            producer.flush(30)
            return [Produced(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]
        finally:
            producer.close(10)

    def _consumer(self) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)

    def consume(self, topic: str, partition: int, start: int, count: int, timeout_s: float = 20) -> list[Rec]:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
            out: list[Rec] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                for msgs in consumer.poll(500).values():
                    for m in msgs:
                        out.append(
                            Rec(m.key, m.value, tuple(m.headers or ()), m.partition, m.timestamp, m.offset)
                        )
            return out
        finally:
            consumer.close()

    def offset_for_time(self, topic: str, partition: int, ts: int) -> int:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            tp = TopicPartition(topic, partition)
            found = consumer.offsets_for_times({tp: ts})[tp]
            return -1 if found is None else int(found.offset)
        finally:
            consumer.close()

    def delete_records(self, topic: str, partition: int, before: int) -> int:
        from kafka import TopicPartition
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            result = admin.delete_records({TopicPartition(topic, partition): before})
            return int(next(iter(result.values()))["low_watermark"])
        finally:
            admin.close()

    def close(self) -> None:
        pass


# --- aiokafka ---------------------------------------------------------------------------------------
@dataclass
class AioKafkaClient:
    bootstrap: str
    name: str = "aiokafka"
    producer_settings: dict[str, Any] = field(default_factory=dict)

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def run() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
            finally:
                await admin.close()

        asyncio.run(run())

    def produce(self, topic: str, records: Sequence[Rec], compression: str = "none") -> list[Produced]:
        from aiokafka import AIOKafkaProducer

        async def run() -> list[Produced]:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                compression_type=None if compression == "none" else compression,
                linger_ms=5,
                **self.producer_settings,
            )
            await producer.start()
            try:
                futures = [
                    await producer.send(
                        topic,
                        value=r.value,
                        key=r.key,
                        headers=list(r.headers) or None,
                        partition=r.partition,
                        timestamp_ms=r.timestamp,
                    )
                    for r in records
                ]
                metas = [await f for f in futures]
                return [Produced(m.partition, m.offset) for m in metas]
            finally:
                await producer.stop()

        return asyncio.run(run())

    def consume(self, topic: str, partition: int, start: int, count: int, timeout_s: float = 20) -> list[Rec]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> list[Rec]:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                consumer.assign([tp])
                consumer.seek(tp, start)
                out: list[Rec] = []
                deadline = time.monotonic() + timeout_s
                while len(out) < count and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    for msgs in batches.values():
                        for m in msgs:
                            out.append(
                                Rec(
                                    m.key, m.value, tuple(m.headers or ()), m.partition, m.timestamp, m.offset
                                )
                            )
                return out
            finally:
                await consumer.stop()

        return asyncio.run(run())

    def offset_for_time(self, topic: str, partition: int, ts: int) -> int:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> int:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
            await consumer.start()
            try:
                tp = TopicPartition(topic, partition)
                found = (await consumer.offsets_for_times({tp: ts}))[tp]
                return -1 if found is None else int(found.offset)
            finally:
                await consumer.stop()

        return asyncio.run(run())

    def delete_records(self, topic: str, partition: int, before: int) -> int:
        from aiokafka import TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

        async def run() -> int:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                result = await admin.delete_records(
                    {TopicPartition(topic, partition): RecordsToDelete(before)}
                )
                return int(next(iter(result.values())))
            finally:
                await admin.close()

        return asyncio.run(run())

    def close(self) -> None:
        pass


CLIENTS = {"confluent-kafka": ConfluentClient, "kafka-python": KafkaPythonClient, "aiokafka": AioKafkaClient}


def make_client(name: str, bootstrap: str, producer: dict[str, Any] | None = None) -> Any:
    """The adapter of library ``name``; ``producer`` adds settings to every producer it makes."""
    return CLIENTS[name](bootstrap, producer_settings=dict(producer or {}))
