"""``strom transactions list | describe | producers | abort``: the transaction admin APIs (KIP-664).

confluent-kafka 2.16's AdminClient has no ListTransactions, DescribeTransactions or DescribeProducers,
so this tool uses kafka-python's ``KafkaAdminClient`` (``strom.console.kafka_admin``), which routes the
requests as Kafka's admin client does:

- ``list`` asks every broker for the transactional ids it coordinates (ListTransactions) and merges
  them into one table; ``--state`` and ``--producer-id`` filter on the brokers.
- ``list --hanging`` asks each broker, with its own ``transaction.max.timeout.ms`` (DescribeConfigs),
  for transactions open (Ongoing, PrepareCommit, PrepareAbort) longer than that (ListTransactions v1's
  duration filter), then describes them. The coordinator aborts a transaction once its own timeout
  (at most that maximum) has passed, so one listed here is stuck: typically a coordinator that cannot
  write its markers, or a partition whose leader is gone.
- ``describe`` asks the id's coordinator (FindCoordinator key type 1, then DescribeTransactions).
- ``abort`` ends a hanging transaction on one partition: the producer whose open transaction starts
  at the given offset (DescribeProducers) gets an ABORT marker written by the partition's leader
  (WriteTxnMarkers with its producer and coordinator epochs), as ``kafka-transactions.sh abort
  --start-offset`` does. Only for transactions no coordinator will end: a live one's producer is not
  fenced by it.
- ``producers`` asks each partition's leader (DescribeProducers) for the producer state it holds. A
  producer with an open transaction on the partition whose last write is older than the leader's
  ``transaction.max.timeout.ms`` is checked with its coordinator (ListTransactions by producer id,
  then DescribeTransactions): when no coordinator describes that transaction open on the partition at
  that epoch, HANGING says ``yes``; nothing will write its marker, and the partition's last stable
  offset stays pinned (Kafka's ``kafka-transactions.sh find-hanging`` decides the same way).

Errors are one line (:class:`ConsoleError`), as for every console tool. Single-threaded.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from kafka.admin import AbortTransactionSpec, ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import TransactionalIdNotFoundError
from kafka.structs import TopicPartition

from strom.console.clients import ClientOptions, print_table
from strom.console.errors import ConsoleError
from strom.console.kafka_admin import admin_call, kafka_admin

T = TypeVar("T")
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
MAX_TIMEOUT_CONFIG = "transaction.max.timeout.ms"
DEFAULT_MAX_TIMEOUT_MS = 900_000  # Kafka's default, when a broker does not report its own

LIST_HEADER = ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
DESCRIBE_HEADER = [
    "TRANSACTIONAL-ID",
    "COORDINATOR",
    "PRODUCER-ID",
    "EPOCH",
    "STATE",
    "TIMEOUT-MS",
    "START-TIME",
    "DURATION-MS",
    "PARTITIONS",
]
PRODUCERS_HEADER = [
    "PARTITION",
    "PRODUCER-ID",
    "EPOCH",
    "LAST-SEQUENCE",
    "LAST-TIMESTAMP",
    "COORDINATOR-EPOCH",
    "TXN-START-OFFSET",
    "HANGING",
]


@dataclass(frozen=True, slots=True)
class ListRequest:
    states: Sequence[str] = ()
    producer_ids: Sequence[int] = ()
    hanging: bool = False


def list_transactions(options: ClientOptions, request: ListRequest, out: TextIO) -> None:
    """One table of every broker's transactional ids (``--hanging``: the stuck ones, described)."""
    with _admin(options) as admin:
        if request.hanging:
            print_table([DESCRIBE_HEADER, *_hanging_rows(admin, options, request)], out)
            return
        listed = _call(
            options,
            "list transactions",
            lambda: admin.list_transactions(
                state_filters=list(request.states) or None,
                producer_id_filters=list(request.producer_ids) or None,
            ),
        )
    rows = [
        [t.transactional_id, str(broker), str(t.producer_id), t.state.value]
        for broker, txns in listed.items()
        for t in txns
    ]
    print_table([LIST_HEADER, *sorted(rows)], out)


def _hanging_rows(admin: KafkaAdminClient, options: ClientOptions, request: ListRequest) -> list[list[str]]:
    brokers = _call(
        options, "list brokers", lambda: [b["broker_id"] for b in admin.describe_cluster()["brokers"]]
    )
    ids: list[str] = []
    states = [s for s in OPEN_STATES if not request.states or s in request.states]
    for broker in sorted(brokers):
        max_timeout_ms = _max_timeout_ms(admin, options, broker)

        def open_too_long(broker: int = broker, duration_ms: int = max_timeout_ms) -> Any:
            return admin.list_transactions(
                broker_ids=[broker],
                state_filters=states,
                producer_id_filters=list(request.producer_ids) or None,
                duration_filter_ms=duration_ms,
            )

        listed = _call(options, f"list transactions of broker {broker}", open_too_long)
        ids += [t.transactional_id for txns in listed.values() for t in txns]
    if not ids:
        return []
    described = _call(options, "describe transactions", lambda: admin.describe_transactions(sorted(ids)))
    return [_describe_row(tid, desc) for tid, desc in sorted(described.items())]


def _max_timeout_ms(admin: KafkaAdminClient, options: ClientOptions, broker: int) -> int:
    resource = ConfigResource(ConfigResourceType.BROKER, str(broker), [MAX_TIMEOUT_CONFIG])
    found = _call(
        options,
        f"describe the configs of broker {broker}",
        lambda: admin.describe_configs([resource], config_filter="all"),
    )
    entry = found.get("broker", {}).get(str(broker), {}).get(MAX_TIMEOUT_CONFIG)
    value = entry.get("value") if isinstance(entry, dict) else entry
    return int(value) if value is not None else DEFAULT_MAX_TIMEOUT_MS


def describe_transaction(options: ClientOptions, transactional_id: str, out: TextIO) -> None:
    with _admin(options) as admin:
        try:
            described = _call(
                options,
                f"describe {transactional_id!r}",
                lambda: admin.describe_transactions([transactional_id]),
            )
        except _NotFound:
            raise ConsoleError(
                f"transactional id {transactional_id!r} is not known to its coordinator"
            ) from None
    print_table([DESCRIBE_HEADER, _describe_row(transactional_id, described[transactional_id])], out)


def _describe_row(transactional_id: str, desc: Any) -> list[str]:
    start_ms = int(desc.transaction_start_time_ms)
    running = start_ms >= 0 and desc.state.value in OPEN_STATES  # a finished one has no duration
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(desc.topic_partitions))
    return [
        transactional_id,
        str(desc.coordinator_id),
        str(desc.producer_id),
        str(desc.producer_epoch),
        desc.state.value,
        str(desc.transaction_timeout_ms),
        _iso(start_ms) if start_ms >= 0 else "-",
        str(int(time.time() * 1000) - start_ms) if running else "-",
        partitions or "-",
    ]


def describe_producers(options: ClientOptions, topic: str, partitions: Sequence[int], out: TextIO) -> None:
    with _admin(options) as admin:
        leaders = _leaders_of(admin, options, topic)
        wanted = [TopicPartition(topic, p) for p in sorted(set(partitions or leaders))]
        found = _call(options, f"describe the producers of {topic}", lambda: admin.describe_producers(wanted))
        now_ms = int(time.time() * 1000)
        timeouts: dict[int, int] = {}
        candidates = []
        for tp in wanted:
            leader = leaders.get(tp.partition, -1)
            if leader not in timeouts:
                timeouts[leader] = (
                    _max_timeout_ms(admin, options, leader) if leader >= 0 else DEFAULT_MAX_TIMEOUT_MS
                )
            candidates += [
                (tp, p)
                for p in found[tp].active_producers
                if p.current_transaction_start_offset >= 0 and now_ms - p.last_timestamp > timeouts[leader]
            ]
        hanging = _hanging_producers(admin, options, candidates)
    rows = [
        [
            str(tp.partition),
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.last_sequence),
            _iso(p.last_timestamp) if p.last_timestamp >= 0 else "-",
            str(p.coordinator_epoch),
            str(p.current_transaction_start_offset),
            _hanging_cell(p.current_transaction_start_offset, (tp.partition, p.producer_id) in hanging),
        ]
        for tp in wanted
        for p in found[tp].active_producers
    ]
    print_table([PRODUCERS_HEADER, *rows], out)


def _hanging_cell(txn_start_offset: int, hanging: bool) -> str:
    if txn_start_offset < 0:
        return "-"
    return "yes" if hanging else "no"


def _hanging_producers(
    admin: KafkaAdminClient, options: ClientOptions, candidates: list[tuple[TopicPartition, Any]]
) -> set[tuple[int, int]]:
    """(partition, producer id) of the candidates whose coordinator knows no such open transaction."""
    if not candidates:
        return set()
    pids = sorted({p.producer_id for _, p in candidates})
    listed = _call(options, "list transactions", lambda: admin.list_transactions(producer_id_filters=pids))
    ids_of: dict[int, list[str]] = {}
    for rows in listed.values():
        for row in rows:
            ids_of.setdefault(row.producer_id, []).append(row.transactional_id)
    described: dict[str, Any] = {}
    for tid in sorted({tid for ids in ids_of.values() for tid in ids}):

        def describe(tid: str = tid) -> Any:
            return admin.describe_transactions([tid])

        try:
            described.update(_call(options, f"describe {tid!r}", describe))
        except _NotFound:
            continue  # expired meanwhile: the coordinator knows nothing of it
    out = set()
    for tp, p in candidates:
        known = [
            (d.state.value, d.producer_epoch, {(x.topic, x.partition) for x in d.topic_partitions})
            for d in (described[t] for t in ids_of.get(p.producer_id, []) if t in described)
        ]
        if not coordinator_knows(tp.topic, tp.partition, p.producer_epoch, known):
            out.add((tp.partition, p.producer_id))
    return out


def coordinator_knows(
    topic: str,
    partition: int,
    producer_epoch: int,
    described: Sequence[tuple[str, int, set[tuple[str, int]]]],
) -> bool:
    """Whether a coordinator describes an open transaction of this producer epoch on the partition
    (``described``: state, producer epoch and partitions of each id the producer id is listed under).
    A partition's open transaction that no coordinator describes so is hanging: nothing will ever
    write its marker, and it pins the partition's last stable offset (as Kafka's find-hanging tool
    decides)."""
    return any(
        state in OPEN_STATES and epoch == producer_epoch and (topic, partition) in partitions
        for state, epoch, partitions in described
    )


def abort_transaction(
    options: ClientOptions, topic: str, partition: int, start_offset: int, out: TextIO
) -> None:
    """Abort the open transaction that starts at ``start_offset`` on the partition (WriteTxnMarkers to
    its leader, with the producer epoch and coordinator epoch the leader reports)."""
    tp = TopicPartition(topic, partition)
    with _admin(options) as admin:
        leaders = _leaders_of(admin, options, topic)
        if partition not in leaders:
            raise ConsoleError(f"topic {topic!r} has no partition {partition}")
        found = _call(
            options, f"describe the producers of {topic}-{partition}", lambda: admin.describe_producers([tp])
        )
        matching = [
            p for p in found[tp].active_producers if p.current_transaction_start_offset == start_offset
        ]
        if not matching:
            raise ConsoleError(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
        (producer,) = matching
        spec = AbortTransactionSpec(
            tp, producer.producer_id, producer.producer_epoch, producer.coordinator_epoch
        )
        _call(
            options,
            f"abort the transaction at {topic}-{partition} offset {start_offset}",
            lambda: admin.abort_transaction(spec),
        )
    print(
        f"Aborted the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}) "
        f"that started at offset {start_offset} of {topic}-{partition}.",
        file=out,
    )


def _leaders_of(admin: KafkaAdminClient, options: ClientOptions, topic: str) -> dict[int, int]:
    (described,) = _call(options, f"describe topic {topic}", lambda: admin.describe_topics([topic]))
    if described.get("error_code", 0) != 0 or not described.get("partitions"):
        raise ConsoleError(f"topic {topic!r} does not exist")
    return {int(p["partition_index"]): int(p["leader_id"]) for p in described["partitions"]}


# --- helpers -----------------------------------------------------------------------------------


class _NotFound(Exception):
    pass


def _admin(options: ClientOptions) -> AbstractContextManager[KafkaAdminClient]:
    return kafka_admin(options, "transactions")


def _call(options: ClientOptions, what: str, fn: Callable[[], T]) -> T:
    try:
        return admin_call(options, what, fn, passthrough=(TransactionalIdNotFoundError,))
    except TransactionalIdNotFoundError:
        raise _NotFound() from None


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
