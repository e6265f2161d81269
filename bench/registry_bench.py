"""Schema registry lookups per second against a real broker process, with the client's cache off.

    PYTHONPATH=src .venv/bin/python bench/registry_bench.py [--seconds 5] [--schemas 100] [--clients 1,4]

Starts one broker (`BrokerProcess`, HTTP on an ephemeral port), registers ``--schemas`` schemas under
as many subjects, then for ``--seconds`` per case measures:

* ``by-id``: confluent-kafka's `SchemaRegistryClient.get_schema(id)` (what `AvroDeserializer` calls for
  a new id) with ``clear_caches()`` before every call, so each lookup is an HTTP request;
* ``latest``: `get_latest_version(subject)` the same way (what ``use.latest.version`` serializers call);
* ``lookup``: `lookup_schema(subject, schema)`, a POST whose schema the registry parses and
  canonicalises;

each with 1 and 4 client processes (each its own client, one request at a time, ids and subjects
round-robin). Reports lookups/s and the broker's CPU microseconds per lookup (utime + stime from
/proc): the broker serves HTTP on its one event loop, so 1e6 / (CPU per lookup) bounds what one broker
answers on one core.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from strom.testing import BrokerProcess


def schema_text(i: int) -> str:
    fields = [{"name": f"f{j}", "type": ["null", "string"], "default": None} for j in range(8)]
    return json.dumps({"type": "record", "name": f"Event{i}", "namespace": "bench", "fields": fields})


def _cases(n: int, ids: list[int]) -> dict[str, Callable[[SchemaRegistryClient, int], object]]:
    return {
        "by-id": lambda c, i: c.get_schema(ids[i % n]),
        "latest": lambda c, i: c.get_latest_version(f"s{i % n}-value"),
        "lookup": lambda c, i: c.lookup_schema(f"s{i % n}-value", Schema(schema_text(i % n), "AVRO")),
    }


def _client_process(url: str, case: str, ids: list[int], slot: int, clients: int, seconds: float) -> int:
    """One client process: lookups in a loop, the cache cleared before each; returns the count."""
    call = _cases(len(ids), ids)[case]
    client = SchemaRegistryClient({"url": url})
    done, i = 0, slot
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        client.clear_caches()
        call(client, i)
        done += 1
        i += clients
    return done


def run_case(url: str, case: str, ids: list[int], clients: int, seconds: float) -> int:
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        jobs = [(url, case, ids, slot, clients, seconds) for slot in range(clients)]
        return sum(pool.starmap(_client_process, jobs))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--schemas", type=int, default=100)
    parser.add_argument("--clients", default="1,4", help="client process counts (comma-separated)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp) / "data") as broker:
        assert broker.http_url is not None
        setup = SchemaRegistryClient({"url": broker.http_url})
        n = args.schemas
        ids = [setup.register_schema(f"s{i}-value", Schema(schema_text(i), "AVRO")) for i in range(n)]
        print(f"{n} schemas registered; {args.seconds:g} s per case; load average {os.getloadavg()[0]:.1f}")
        print(f"{'case':8} {'clients':>7} {'lookups/s':>10} {'broker CPU us/lookup':>21}")
        for name in _cases(n, ids):
            for clients in (int(t) for t in args.clients.split(",")):
                cpu_before = sum(broker.cpu_times())
                done = run_case(broker.http_url, name, ids, clients, args.seconds)
                cpu = sum(broker.cpu_times()) - cpu_before
                rate = done / args.seconds
                print(f"{name:8} {clients:>7} {rate:>10.0f} {1e6 * cpu / max(done, 1):>21.0f}")


if __name__ == "__main__":
    main()
