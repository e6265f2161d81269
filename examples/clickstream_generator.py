"""Clickstream generator: realistic web page-view events, JSON, keyed by user, at a configurable rate.

Each event is `{"user": "user-17", "page": "/checkout", "latency_ms": 231, "ts": 1700000000123}` (`ts` in
epoch milliseconds, also used as the Kafka record timestamp), as JSON or -- `--registry URL` -- as Avro in
Confluent's wire format through a schema registry (Strom's own, `strom serve` on port 8081): schema
`CLICK_V1`, or from `--v2-after N` events on `CLICK_V2`, which adds `country` with a default, the kind of
change BACKWARD compatibility allows while consumers keep running. Users follow a skewed (Zipf-like) activity
distribution, pages a fixed popularity mix, latencies a log-normal distribution whose median depends on the
page -- so per-page p95 latencies differ visibly. `time_scale` makes event time run faster than the wall
clock (10 = ten event-seconds per second) so a demo sees minute windows close within seconds.

Usage::

    python examples/clickstream_generator.py --bootstrap 127.0.0.1:9092 --topic clicks --rate 500 --seconds 30
    python examples/clickstream_generator.py --bootstrap 127.0.0.1:9092 --registry http://127.0.0.1:8081
"""

from __future__ import annotations

import argparse
import json
import random
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Producer

PAGES = {  # page: (popularity weight, median latency ms)
    "/": (30, 40),
    "/search": (20, 120),
    "/product": (25, 80),
    "/cart": (10, 60),
    "/checkout": (8, 250),
    "/account": (7, 90),
}
COUNTRIES = ["de", "fr", "nl", "pl", "us"]
CLICK_V1: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "namespace": "strom.demo",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "latency_ms", "type": "int"},
        {"name": "ts", "type": "long"},
    ],
}
CLICK_V2: dict[str, Any] = {
    **CLICK_V1,
    "fields": [*CLICK_V1["fields"], {"name": "country", "type": "string", "default": "unknown"}],
}


@dataclass(frozen=True)
class Click:
    user: str
    page: str
    latency_ms: int
    ts: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


def generate_events(
    count: int, *, start_ms: int, step_ms: float, users: int = 50, seed: int = 1
) -> Iterator[Click]:
    """`count` deterministic clicks, `step_ms` of event time apart (with a little jitter)."""
    rng = random.Random(seed)
    pages = list(PAGES)
    weights = [PAGES[p][0] for p in pages]
    user_weights = [1 / (i + 1) for i in range(users)]
    for i in range(count):
        page = rng.choices(pages, weights)[0]
        user = f"user-{rng.choices(range(users), user_weights)[0]}"
        latency = max(1, int(rng.lognormvariate(0, 0.6) * PAGES[page][1]))
        ts = start_ms + int(i * step_ms + rng.uniform(0, step_ms / 2))
        yield Click(user, page, latency, ts)


def produce_clicks(bootstrap: str, topic: str, clicks: Iterator[Click], *, rate: float | None = None) -> int:
    """Produce clicks keyed by user (murmur2, as Java clients place them); `rate` events/s, or unpaced."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
        }
    )
    records = ((click.to_json(), click.user.encode(), click.ts) for click in clicks)
    return _produce_paced(producer, topic, records, rate)


def _produce_paced(
    producer: Producer, topic: str, records: Iterable[tuple[bytes, bytes, int]], rate: float | None
) -> int:
    """Produce (value, key, timestamp ms) records at `rate`/s (None: unpaced), then wait for every
    delivery; returns how many were sent."""
    started, sent = time.monotonic(), 0
    for value, key, timestamp_ms in records:
        producer.produce(topic, value, key, timestamp=timestamp_ms)
        sent += 1
        if rate and sent % max(1, int(rate / 20)) == 0:
            producer.poll(0)
            ahead_s = sent / rate - (time.monotonic() - started)
            if ahead_s > 0:
                time.sleep(ahead_s)
    if producer.flush(30):
        raise RuntimeError("clickstream generator: some events were not delivered")
    return sent


def produce_avro_clicks(
    bootstrap: str,
    topic: str,
    clicks: Iterator[Click],
    registry_url: str,
    *,
    rate: float | None = None,
    v2_after: int | None = None,
    on_v2: Any = None,
) -> int:
    """Produce clicks as Avro through the registry: `CLICK_V1`, then `CLICK_V2` from event `v2_after` on.

    confluent-kafka's `AvroSerializer` registers each schema under `<topic>-value` on first use (v2 is a
    BACKWARD-compatible new version) and frames every record with its schema id.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": registry_url})
    v1 = AvroSerializer(registry, json.dumps(CLICK_V1))
    v2 = AvroSerializer(registry, json.dumps(CLICK_V2))
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})

    def records() -> Iterator[tuple[bytes, bytes, int]]:
        for n, click in enumerate(clicks):
            record = asdict(click)
            if v2_after is not None and n >= v2_after:
                record["country"] = COUNTRIES[zlib.crc32(click.user.encode()) % len(COUNTRIES)]
                value = v2(record, context)  # the first call registers CLICK_V2
                if n == v2_after and on_v2 is not None:
                    on_v2()
            else:
                value = v1(record, context)
            yield value, click.user.encode(), click.ts

    return _produce_paced(producer, topic, records(), rate)


def live_clicks(*, rate: float, seconds: float, time_scale: float = 1.0, seed: int = 1) -> Iterator[Click]:
    """Clicks for `seconds` of wall time at `rate`/s; event time starts now, `time_scale` times faster."""
    count = int(rate * seconds)
    return generate_events(
        count, start_ms=int(time.time() * 1000), step_ms=1000 * time_scale / rate, seed=seed
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--rate", type=float, default=200.0, help="events per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--time-scale", type=float, default=1.0, help="event seconds per wall second")
    parser.add_argument("--registry", help="schema registry URL: produce Avro instead of JSON")
    parser.add_argument("--v2-after", type=int, help="with --registry: switch to CLICK_V2 after N events")
    args = parser.parse_args()
    clicks = live_clicks(rate=args.rate, seconds=args.seconds, time_scale=args.time_scale)
    if args.registry:
        sent = produce_avro_clicks(
            args.bootstrap, args.topic, clicks, args.registry, rate=args.rate, v2_after=args.v2_after
        )
    else:
        sent = produce_clicks(args.bootstrap, args.topic, clicks, rate=args.rate)
    print(f"produced {sent} clicks")


if __name__ == "__main__":
    main()
