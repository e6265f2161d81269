"""Iceberg topics: translation throughput per broker core, and what translation costs produce.

    PYTHONPATH=src .venv/bin/python bench/iceberg_bench.py [--records 100000] [--sizes 100,1000]

Starts one broker (`BrokerProcess`, the default SQL catalog in its data dir). For each value size
(Avro records of one string field padded to about that many bytes, Confluent wire format through
confluent-kafka's AvroSerializer, serialized once and produced as bytes):

* ``translation``: ``--records`` records produced to a 1-partition topic without translation, then
  ``strom.iceberg.mode=value_schema_id_prefix`` turned on (target lag 100 ms); measured from then
  until the table's snapshot summary records every offset:
  records/s of wall time and records per broker CPU second (utime + stime from /proc; the broker is
  otherwise idle, so this is translation's cost: reads, Avro decoding, Arrow, Parquet and the commits);
* ``produce``: the same records produced to a topic without translation and to one with it
  (``strom.iceberg.target.lag.ms=1000``, the translation running meanwhile), alternately, three rounds
  each; reports records/s of each and the ratio (same run, same machine).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from strom.testing import BrokerProcess

SET = AlterConfigOpType.SET
SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [{"name": "body", "type": "string"}],
}


def values(broker: BrokerProcess, topic: str, size: int, count: int) -> list[bytes]:
    assert broker.http_url is not None
    serializer = AvroSerializer(SchemaRegistryClient({"url": broker.http_url}), json.dumps(SCHEMA))
    context = SerializationContext(topic, MessageField.VALUE)
    one = serializer({"body": "x" * max(size - 7, 1)}, context)
    assert one is not None
    return [one] * count


def create(admin: AdminClient, topic: str, configs: dict[str, str]) -> None:
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, payloads: list[bytes]) -> float:
    """Seconds to produce and flush ``payloads``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": "1"})
    began = time.perf_counter()
    for value in payloads:
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def next_offset(log_dir: Path, topic: str) -> int:
    base = log_dir / "iceberg"
    if not (base / "catalog.db").exists():
        return 0
    catalog = load_catalog(
        "strom", type="sql", uri=f"sqlite:///{base}/catalog.db", warehouse=f"file://{base}/warehouse"
    )
    try:
        snapshot = catalog.load_table(("strom", topic)).current_snapshot()
    except NoSuchTableError:
        return 0
    if snapshot is None or snapshot.summary is None:
        return 0
    raw = snapshot.summary.additional_properties.get("strom.next-offsets", "{}")
    return int(json.loads(raw).get("0", 0))


def cpu(broker: BrokerProcess) -> float:
    user, system = broker.cpu_times()
    return user + system


def run(records: int, sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"strom.iceberg.translation.interval.ms": "100"})
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            log_dir = broker.data_dir / "logs"
            # A first Iceberg topic, so that the translator is built (pyiceberg imported) before measuring.
            create(
                admin, "warm-up", {"strom.iceberg.mode": "key_value", "strom.iceberg.target.lag.ms": "100"}
            )
            produce(broker.bootstrap, "warm-up", [b"x"])
            while next_offset(log_dir, "warm-up") < 1:
                time.sleep(0.1)
            for size in sizes:
                topic = f"translate-{size}"
                create(
                    admin,
                    topic,
                    {
                        "strom.iceberg.mode": "value_schema_id_prefix",
                        "strom.iceberg.target.lag.ms": "3600000",
                    },
                )
                payloads = values(broker, topic, size, records)
                produce(broker.bootstrap, topic, payloads)
                turn_on = [
                    ConfigEntry("strom.iceberg.mode", "value_schema_id_prefix", incremental_operation=SET),
                    ConfigEntry("strom.iceberg.target.lag.ms", "100", incremental_operation=SET),
                ]
                resource = ConfigResource("TOPIC", topic, incremental_configs=turn_on)
                cpu0, t0 = cpu(broker), time.perf_counter()
                for future in admin.incremental_alter_configs([resource]).values():
                    future.result(30)
                while next_offset(log_dir, topic) < records:
                    time.sleep(0.05)
                wall, used = time.perf_counter() - t0, cpu(broker) - cpu0
                n = records
                print(
                    f"translation {size} B: {n} records in {wall:.2f} s = {n / wall:,.0f} records/s; "
                    f"broker CPU {used:.2f} s = {n / used:,.0f} records per CPU second",
                    flush=True,
                )

                plain, lake = f"plain-{size}", f"lake-{size}"
                create(admin, plain, {})
                create(
                    admin,
                    lake,
                    {"strom.iceberg.mode": "value_schema_id_prefix", "strom.iceberg.target.lag.ms": "1000"},
                )
                rates: dict[str, list[float]] = {plain: [], lake: []}
                for _ in range(3):
                    for name in (plain, lake):
                        rates[name].append(records / produce(broker.bootstrap, name, payloads))
                best = {name: max(r) for name, r in rates.items()}
                print(
                    f"produce {size} B: without translation {best[plain]:,.0f} records/s, "
                    f"with {best[lake]:,.0f} records/s ({100 * best[lake] / best[plain]:.0f}%); "
                    f"rounds {[round(r) for r in rates[plain]]} vs {[round(r) for r in rates[lake]]}",
                    flush=True,
                )
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--sizes", default="100,1000")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}", flush=True)
    run(args.records, [int(s) for s in args.sizes.split(",")])


if __name__ == "__main__":
    main()
