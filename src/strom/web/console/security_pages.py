"""The console's security and transaction pages (pure: values in, HTML out).

* ``/ui/acls``: every ACL binding (the broker's authorizer keeps all of them, read from the metadata
  store, so any broker shows the same), as Kafka's DescribeAcls lists them; needs DESCRIBE on the
  cluster, as DescribeAcls does.
* ``/ui/users``: SCRAM users with their mechanisms and iteration counts (never a salt or a key), as
  DescribeUserScramCredentials answers; needs DESCRIBE on the cluster.
* ``/ui/transactions``: the transactional ids of every broker's transaction coordinator (`remote_txns`)
  with state, producer id and epoch, timeout, age, the partitions of the ongoing transaction and the
  coordinator; each id needs DESCRIBE on it (resource type TransactionalId), as ListTransactions
  filters.

* ``/ui/quotas``: client quotas by entity (user, client id, both, defaults), as DescribeClientQuotas
  lists them, and the throttling this broker applies now; needs DESCRIBE_CONFIGS on the cluster.

Producer state (DescribeProducers: each producer's epoch, last sequence, last timestamp and ongoing
transaction's first offset) is on the partition page, from the partition's replica here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from strom.acl.model import AclBinding, pascal
from strom.quota.entity import QuotaEntity
from strom.storage.producer_state import ProducerStateEntry
from strom.web.console.message_pages import format_time
from strom.web.console.pages import esc, link, page, table, topic_path
from strom.web.console.remote_txns import TxnRow


def acls_page(bindings: Iterable[AclBinding] | None) -> str:
    if bindings is None:
        return page(
            "ACLs",
            "<p id='no-authorizer'>No authorizer is configured (<code>authorizer.class.name</code>): "
            "every principal may do everything.</p>",
        )
    rows = sorted(
        (pascal(b.pattern.resource_type.name), b.pattern.name, pascal(b.pattern.pattern_type.name),
         b.entry.principal, b.entry.host, pascal(b.entry.operation.name), pascal(b.entry.permission.name))
        for b in bindings
    )  # fmt: skip
    header = ["Resource type", "Name", "Pattern", "Principal", "Host", "Operation", "Permission"]
    listed = table(header, [[esc(c) for c in row] for row in rows], "acls")
    return page("ACLs", listed + f"<p class='muted'>{len(rows)} bindings. Change them with strom acls.</p>")


def users_page(users: dict[str, dict[str, int]]) -> str:
    rows = [
        [
            esc(user),
            esc(", ".join(f"{mech} ({iterations:,} iterations)" for mech, iterations in sorted(m.items()))),
        ]
        for user, m in sorted(users.items())
    ]
    note = "<p class='muted'>SCRAM credentials in the metadata store. Change them with strom users.</p>"
    return page("SCRAM users", table(["User", "Mechanisms"], rows, "users") + note)


def transactions_page(txns: Iterable[TxnRow], now_ms: int, unanswered: list[int]) -> str:
    rows = []
    for t in sorted(txns, key=lambda t: t.transactional_id):
        age = f"{(now_ms - t.start_ms) / 1000:,.1f} s" if t.start_ms >= 0 else "-"
        parts = ", ".join(f"{topic}-{p}" for topic, p in t.partitions) or "-"
        rows.append(
            [esc(t.transactional_id), esc(t.state), esc(t.producer_id), esc(t.producer_epoch),
             esc(f"{t.timeout_ms:,} ms"), esc(age), esc(parts), esc(t.coordinator)]
        )  # fmt: skip
    header = [
        "Transactional id",
        "State",
        "Producer id",
        "Epoch",
        "Timeout",
        "Age",
        "Partitions",
        "Coordinator",
    ]
    note = (
        "<p class='muted'>Transactional ids of every broker's transaction coordinator (the leader of their "
        "__transaction_state partition; other brokers' through ListTransactions and DescribeTransactions). "
        "Partitions: those of the ongoing transaction still without their marker.</p>"
    )
    if unanswered:
        note += f"<p class='bad'>Brokers {esc(', '.join(map(str, unanswered)))} did not answer.</p>"
    return page("Transactions", table(header, rows, "transactions") + note)


def producers_html(topic: str, index: int, producers: list[ProducerStateEntry]) -> str:
    rows = [
        [esc(p.producer_id), esc(p.producer_epoch), esc(p.last_seq), esc(p.last_offset),
         esc(format_time(p.last_timestamp) if p.last_timestamp >= 0 else "-"),
         esc(p.current_txn_first_offset if p.current_txn_first_offset >= 0 else "-")]
        for p in sorted(producers, key=lambda p: p.producer_id)
    ]  # fmt: skip
    header = ["Producer id", "Epoch", "Last sequence", "Last offset", "Last timestamp", "Ongoing txn from"]
    back = link(topic_path(topic, index), f"{topic}-{index}")
    return f"<p class='muted'>Idempotent and transactional producers of {back}.</p>" + table(
        header, rows, "producers"
    )


def quotas_page(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], throttles: list[tuple[str, str, str, float]]
) -> str:
    """Client quotas (every broker holds them all, from the metadata store) and the throttling this
    broker applies now: (quota key, user, client id, mean throttle ms) of its quota sensors."""
    rows = [
        [esc(entity.describe()), esc(", ".join(f"{k}={v:g}" for k, v in sorted(values.items())))]
        for entity, values in sorted(quotas.items(), key=lambda kv: kv[0].describe())
    ]
    listed = table(["Entity", "Quotas"], rows, "quotas")
    if not rows:
        listed = "<p id='no-quotas'>No client quotas are set.</p>"
    sensed = table(
        ["Quota", "User", "Client id", "Mean throttle (ms)"],
        [[esc(k), esc(u or "-"), esc(c or "-"), esc(f"{t:,.1f}")] for k, u, c, t in sorted(throttles)],
        "throttles",
    )
    note = "<p class='muted'>Set them with strom quotas (kafka-configs' names: producer_byte_rate, ...).</p>"
    return page("Client quotas", listed + note + "<h2>Throttling on this broker</h2>" + sensed)
