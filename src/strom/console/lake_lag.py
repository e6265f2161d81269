"""The Iceberg translation lag of an Iceberg topic's partitions, for ``strom topics describe``.

Each partition's leader translates it, so the leader is the one to ask, the way Kafka asks a leader
about its partition's offsets: ListOffsets, sent to each leader, with Strom's ``ICEBERG_TABLE``
timestamp (-100, strom.broker.lake.lag) answers the next offset the partition's table
records and the wall time since which its oldest record not yet in the table has waited; the same
request with latest (-1) and read_committed answers the last stable offset (both built and read by
strom.broker.lake.lag, as the web console's topic page asks them). The lag is the difference,
in records, and the time since then, in seconds: what the leader's ``/metrics`` has as
``strom_iceberg_translation_lag_records`` and ``_seconds``. A leader that does not translate the
partition (yet) answers -1: the lag is then unknown.

No installed admin client sends a timestamp below Kafka's own (confluent-kafka and kafka-python refuse
-100), so the CLI's protocol client (strom.console.wire) asks, with ``--command-config``'s security
properties; with a SASL mechanism it does not speak the lag is left out of the lines (docs/cli.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

from strom.broker.lake.lag import LIST_OFFSETS_VERSION, TableLag, lag_requests, lags_answered
from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.leader_offsets import by_leader
from strom.console.wire import WireClient, supported
from strom.protocol.api import ApiKey


def describe_fields(lag: TableLag, now_ms: int) -> str:
    """The tab-separated fields ``strom topics describe`` appends to the partition's line."""
    if not lag.known:
        return "\tIcebergLag: unknown (not translated yet)"
    return f"\tInTable: {lag.next_offset}\tIcebergLag: {lag.records} records, {lag.seconds(now_ms):.1f} s"


def translation_lag(
    options: ClientOptions, partitions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], TableLag]:
    """Each (topic, partition)'s translation lag, from its leader; {} when the CLI's protocol client
    cannot connect with the given security settings (a SASL mechanism it does not speak).

    Raises:
        ConsoleError: no broker answered.
    """
    if not partitions or not supported(options):
        return {}
    found: dict[tuple[str, int], TableLag] = {}
    with WireClient(options) as client:
        for address, led in by_leader(client, partitions).items():
            table, stable = lag_requests(led)
            try:
                call = partial(client.call, address, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION)
                found.update(lags_answered(call(table), call(stable)))
            except ConsoleError:
                continue  # a leader that does not answer: its partitions' lag is left out
    return found


def now_ms() -> int:
    return int(time.time() * 1000)
