"""The topic page's Iceberg translation lag: every partition's, whichever broker serves the page.

Each partition's leader translates it, so the leader knows its lag. A partition this broker translates
is read from the translator's own `PartitionLag` (with the rows and dead letters appended since its
translation started here, which only the translating broker counts). Every other partition is asked of
its leader now (the metadata cache names it) the way ``strom topics describe`` asks: ListOffsets with
Strom's `ICEBERG_TABLE` timestamp and latest with read_committed (strom.broker.lake.lag), over the
console's connections to leaders (remote.py, with the broker's inter-broker login; the page has already
checked the person's DESCRIBE on the topic). The leaders are asked concurrently, each once per question,
so a page costs two round trips per leader whatever the partition count. A partition without a leader,
whose leader does not answer in time or does not translate it (yet) is listed with its lag unknown.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import NamedTuple

from strom.broker.broker import Broker
from strom.broker.lake.lag import LIST_OFFSETS_VERSION, TableLag, lag_requests, lags_answered
from strom.protocol.api import ApiKey
from strom.web.console.remote import TIMEOUT_MS, LeaderReads


class LakeLag(NamedTuple):
    """One partition of an Iceberg topic: its lag as its leader knows it."""

    partition: int
    leader: int  # -1: none now
    lag: TableLag | None  # None: unknown (no leader, no answer, not translated yet)
    seconds: float  # how long the oldest record not in the table has waited
    rows: int | None  # appended since the translation started on this broker; None: led elsewhere
    dead: int | None  # dead letters likewise


def is_iceberg_topic(broker: Broker, topic: str) -> bool:
    return broker.topics.log_config_for(topic).strom_iceberg_mode != "disabled"


async def topic_lake_lag(broker: Broker, reads: LeaderReads, topic: str, partitions: int) -> list[LakeLag]:
    """Each of the topic's ``partitions``' lag, in partition order."""
    now_ms = broker.clock.time_ms()
    translator = broker.lake.translator
    local = translator.lag if translator is not None else {}
    found: dict[int, LakeLag] = {}
    asked: defaultdict[tuple[int, str, int], list[int]] = defaultdict(list)
    for index in range(partitions):
        leader = broker.metadata.partition_leader(topic, index)
        here = local.get((topic, index))
        if here is not None and leader is not None and leader.node_id == broker.node_id:
            lag = TableLag(here.position, here.last_stable_offset(), here.waiting_since_ms(now_ms))
            known = lag if lag.known else None
            found[index] = LakeLag(index, broker.node_id, known, lag.seconds(now_ms), here.rows, here.dead)
        elif leader is None:
            found[index] = LakeLag(index, -1, None, 0.0, None, None)
        else:
            asked[(leader.node_id, leader.host, leader.port)].append(index)
    answers = await asyncio.gather(*(_ask(reads, address, topic, led) for address, led in asked.items()))
    for (node, *_), led, answer in zip(asked, asked.values(), answers, strict=True):
        for index in led:
            answered = answer.get(index)
            known = answered if answered is not None and answered.known else None
            seconds = known.seconds(now_ms) if known is not None else 0.0
            found[index] = LakeLag(index, node, known, seconds, None, None)
    return [found[i] for i in range(partitions)]


async def _ask(
    reads: LeaderReads, address: tuple[int, str, int], topic: str, led: list[int]
) -> dict[int, TableLag]:
    """The lag of the partitions ``led`` by the broker at ``address``; those it answered with an error,
    or all when it does not answer, are left out."""
    conn = reads.broker_connection(*address)
    table, stable = lag_requests((topic, i) for i in led)
    try:
        answers = await asyncio.gather(
            conn.send(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, table, TIMEOUT_MS),
            conn.send(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, stable, TIMEOUT_MS),
        )
    except ConnectionError:
        return {}
    return {index: lag for (_, index), lag in lags_answered(*answers).items()}
