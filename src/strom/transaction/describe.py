"""What DescribeTransactions and ListTransactions (KIP-664) report about a coordinator's ids, pure.

A transaction coordinator answers both for the ids of the ``__transaction_state`` partitions it has
loaded; the broker layer checks that it coordinates the id (DescribeTransactions) or lists its own
ids (ListTransactions: every broker lists its own, and admin clients ask every broker).

Listing, as Kafka's ``TransactionStateManager.listTransactionStates`` decides it:

- state filters are Kafka's state names (``Ongoing``, ``PrepareCommit``, ...); names it does not know
  are echoed back as unknown, and when every given filter is unknown nothing matches;
- producer id filters keep only those producers;
- the duration filter (ListTransactions v1+, -1 = none) keeps transactions running longer than that
  many milliseconds: open ones (Ongoing, Prepare*) whose start time is older. Kafka compares the start
  time alone, so it also lists finished ones; only open transactions are running, and the filter is
  what hanging-transaction tools use;
- the transactional id pattern (v2+, KIP-1152; null or empty = none) keeps the ids the regular
  expression matches as a whole (Java's ``Matcher.matches``); `compile_pattern` turns a pattern that
  does not compile into INVALID_REGULAR_EXPRESSION;
- Dead ids are never listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from strom.transaction.coordinator import TxnMetadata
from strom.transaction.state import TxnState

STATE_BY_NAME: dict[str, TxnState] = {state.kafka_name: state for state in TxnState}
NO_DURATION_FILTER = -1


class Listing(NamedTuple):
    """ListTransactions' answer: unknown state filter names, then the ids that match."""

    unknown_state_filters: list[str]
    transactions: list[TxnMetadata]


def list_transactions(
    txns: Iterable[TxnMetadata],
    state_filters: Sequence[str],
    producer_id_filters: Sequence[int],
    now_ms: int,
    duration_filter_ms: int = NO_DURATION_FILTER,
    pattern: re.Pattern[str] | None = None,
) -> Listing:
    unknown = [name for name in state_filters if name not in STATE_BY_NAME]
    states = {STATE_BY_NAME[name] for name in state_filters if name in STATE_BY_NAME}
    if state_filters and not states:
        return Listing(unknown, [])
    producers = set(producer_id_filters)
    matching = [
        meta
        for meta in txns
        if meta.state is not TxnState.DEAD
        and (not producers or meta.producer_id in producers)
        and (not states or meta.state in states)
        and (duration_filter_ms < 0 or running_longer_than(meta, duration_filter_ms, now_ms))
        and (pattern is None or pattern.fullmatch(meta.transactional_id) is not None)
    ]
    matching.sort(key=lambda meta: meta.transactional_id)
    return Listing(unknown, matching)


def compile_pattern(text: str | None) -> re.Pattern[str] | None:
    """ListTransactions v2's pattern, compiled (None for none); ValueError if it does not compile."""
    if not text:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"invalid transactional id pattern {text!r}: {exc}") from None


def running_longer_than(meta: TxnMetadata, duration_ms: int, now_ms: int) -> bool:
    """Whether ``meta`` has an open transaction started more than ``duration_ms`` before ``now_ms``."""
    is_open = meta.state is TxnState.ONGOING or meta.state.is_prepare
    return is_open and meta.start_ms >= 0 and now_ms - meta.start_ms > duration_ms
