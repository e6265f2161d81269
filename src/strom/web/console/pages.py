"""The console's HTML: pure functions from view values (views.py) to pages, server-rendered.

Every dynamic string goes through `esc` (``html.escape``). The style sheet and the one script (the topic
page's live table: it polls ``/ui/api/topics/<topic>/table`` every two seconds and swaps the table's
HTML) are inline, so the console needs nothing from the network at run time.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote

from strom.cluster.broker_table import LEGEND, BrokerTable
from strom.web.console.lake_lag import LakeLag
from strom.web.console.views import ClusterView, GroupRow, GroupView, PartitionRow, TopicRow

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
nav{background:#1f3a5f;padding:.6em 1em}nav a{color:#fff;margin-right:1.2em;text-decoration:none}
main{padding:1em 1.5em}table{border-collapse:collapse;margin:.5em 0 1.2em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#eef2f7}
.leader{font-weight:bold;color:#0a6b2d}.moved{font-weight:bold;color:#b36b00}
.outofsync{color:#b00020;text-decoration:line-through}.down{color:#b00020}
.bad{color:#b00020;font-weight:bold}.ok{color:#0a6b2d}.muted{color:#777}
pre{margin:0;white-space:pre-wrap;max-width:60em}
.charts{display:flex;flex-wrap:wrap;gap:1em}.chart{margin:0 0 1em;border:1px solid #ddd;padding:.4em}
.chart figcaption{font-weight:bold;font-size:.9em}.legend{font-size:.85em}
.add{color:#0a6b2d}.del{color:#b00020}
footer{padding:.5em 1.5em;color:#777;font-size:.85em;border-top:1px solid #eee}
"""

_LIVE_TABLE_JS = """
(function(){
  var box=document.getElementById('broker-table');
  function refresh(){
    fetch(box.dataset.src,{cache:'no-store'}).then(function(r){return r.json();})
      .then(function(j){box.innerHTML=j.html;box.dataset.updated=j.updated;})
      .catch(function(){});
  }
  setInterval(refresh,2000);
})();
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def link(path: str, text: object) -> str:
    return f'<a href="{esc(path)}">{esc(text)}</a>'


def topic_path(topic: str, partition: int | None = None) -> str:
    base = f"/ui/topics/{quote(topic, safe='')}"
    return base if partition is None else f"{base}/{partition}"


def page(title: str, body: str, script: str = "") -> str:
    nav = "".join(
        link(p, t)
        for p, t in (
            ("/ui/", "Cluster"),
            ("/ui/topics", "Topics"),
            ("/ui/groups", "Consumer groups"),
            ("/ui/schemas", "Schemas"),
            ("/ui/acls", "ACLs"),
            ("/ui/users", "Users"),
            ("/ui/transactions", "Transactions"),
            ("/ui/quotas", "Quotas"),
        )
    )
    js = f"<script>{script}</script>" if script else ""
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)} · Strom</title>"
        f"<style>{_STYLE}</style></head><body><nav><b style='color:#fff;margin-right:1.5em'>Strom</b>"
        f"{nav}</nav><main><h1>{esc(title)}</h1>{body}</main>{js}</body></html>"
    )


def answered_by(document: str, broker_id: int, principal: str | None) -> str:
    """The page with a footer naming the broker that answered (any broker serves every page) and who
    asked."""
    who = f" to {esc(principal)}" if principal else ""
    footer = f"<footer id='answered-by'>Answered by broker {esc(broker_id)}{who}.</footer>"
    return document.replace("</body></html>", footer + "</body></html>", 1)


def table(header: Sequence[str], rows: Iterable[Sequence[str]], table_id: str = "") -> str:
    """Cells are HTML already (escape text with `esc`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def forbidden(what: str) -> str:
    return page("Forbidden", f"<p class='bad'>{esc(what)}</p><p>{link('/ui/', 'Back to the cluster')}</p>")


def not_found(what: str) -> str:
    return page("Not found", f"<p class='bad'>{esc(what)}</p><p>{link('/ui/', 'Back to the cluster')}</p>")


def cluster_page(view: ClusterView, charts: str = "") -> str:
    zk = view.zookeeper or "none (single node)"
    zk_class = "ok" if view.zookeeper in (None, "CONNECTED") else "bad"
    facts = table(
        ["Cluster id", "This broker", "Controller", "ZooKeeper session", "Topics", "Partitions"],
        [
            [
                esc(view.cluster_id),
                esc(view.this_broker),
                esc(view.controller),
                f"<span class='{zk_class}'>{esc(zk)}</span>",
                esc(view.topics),
                esc(view.partitions),
            ]
        ],
        "cluster-facts",
    )
    brokers = table(
        ["Broker", "Rack", "Address", "State", "Role"],
        [
            [
                esc(b.broker),
                esc(b.rack or "-"),
                esc(f"{b.host}:{b.port}" if b.alive else "-"),
                "<span class='ok'>alive</span>" if b.alive else "<span class='down'>down</span>",
                "controller" if b.controller else "",
            ]
            for b in view.brokers
        ],
        "brokers",
    )

    def listing(items: list[tuple[str, int]]) -> str:
        if not items:
            return "<span class='ok'>none</span>"
        return ", ".join(link(topic_path(t, p), f"{t}-{p}") for t, p in items)

    health = table(
        ["Under-replicated partitions", "Offline partitions"],
        [[f"<b id='urp'>{len(view.under_replicated)}</b> " + listing(view.under_replicated),
          f"<b id='offline'>{len(view.offline)}</b> " + listing(view.offline)]],
    )  # fmt: skip
    over_time = "<h2>Over time</h2>" + charts if charts else ""
    return page("Cluster", facts + "<h2>Brokers</h2>" + brokers + "<h2>Health</h2>" + health + over_time)


def topics_page(rows: list[TopicRow], actions: str = "") -> str:
    def rate(r: TopicRow) -> str:
        return "-" if r.rate is None else f"{r.rate:,.1f}/s"

    body = table(
        ["Topic", "Partitions", "RF", "Size here", "Messages in (led here)", "Rate", "Under-replicated"],
        [
            [
                link(topic_path(r.name), r.name)
                + (" <span class='muted'>internal</span>" if r.internal else ""),
                esc(r.partitions),
                esc(r.replication_factor),
                esc(f"{r.local_bytes:,} B"),
                esc(f"{r.messages_in:,}"),
                esc(rate(r)),
                f"<span class='{'bad' if r.under_replicated else 'ok'}'>{r.under_replicated}</span>",
            ]
            for r in rows
        ],
        "topics",
    )
    note = "<p class='muted'>Sizes and rates count the replicas and leaders on this broker.</p>"
    return page("Topics", actions + body + note)


def broker_table_html(bt: BrokerTable) -> str:
    def cell_html(partition: int, leads: bool, in_sync: bool, position: int) -> str:
        classes = []
        title = []
        if leads:
            classes.append("leader" if position == 0 else "moved")
            title.append("leads now")
        else:
            title.append("follows")
        if not in_sync:
            classes.append("outofsync")
            title.append("out of sync")
        return f"<span class='{' '.join(classes)}' title='{esc(', '.join(title))}'>P{partition}</span>"

    rows = []
    for row in bt.rows:
        label = esc(row.label) if row.alive else f"<span class='down'>{esc(row.label)} (down)</span>"
        cells = [
            " ".join(cell_html(c.partition, c.leads, c.in_sync, k) for c in column) or ""
            for k, column in enumerate(row.columns)
        ]
        rows.append([label, *cells])
    return table(list(bt.header), rows, "seeds-table")


def topic_page(
    topic: str,
    configs: dict[str, str],
    bt: BrokerTable,
    partitions: list[PartitionRow],
    table_src: str,
    charts: str = "",
    actions: str = "",
    lake_lag: Sequence[LakeLag] = (),
) -> str:
    legend = (
        "<p class='muted'>Bold green: leads as assigned; orange: a follower leads now; struck red: out of "
        f"sync (not in the ISR). Text form: {esc(LEGEND)}</p>"
    )
    live = f"<div id='broker-table' data-src='{esc(table_src)}'>{broker_table_html(bt)}</div>"
    parts = table(
        [
            "Partition",
            "Leader",
            "Epoch",
            "Replicas",
            "ISR",
            "Offline",
            "Log start",
            "Log end",
            "High watermark",
        ],
        [
            [
                link(topic_path(topic, p.partition), p.partition),
                esc(p.leader if p.leader >= 0 else "none"),
                esc(p.leader_epoch),
                esc(",".join(map(str, p.replicas))),
                esc(",".join(map(str, p.isr))),
                esc(",".join(map(str, p.offline)) or "-"),
                *(
                    [esc(p.local.log_start), esc(p.local.log_end), esc(p.local.high_watermark)]
                    if p.local
                    else ["<span class='muted'>not on this broker</span>", "", ""]
                ),
            ]
            for p in partitions
        ],
        "partitions",
    )
    conf = table(["Config", "Value"], [[esc(k), esc(v)] for k, v in sorted(configs.items())], "configs")
    if not configs:
        conf = "<p class='muted'>No overrides: broker defaults apply.</p>"
    body = (
        actions
        + ("<h2>Throughput</h2>" + charts if charts else "")
        + "<h2>Brokers and replicas</h2>"
        + live
        + legend
        + "<h2>Partitions</h2>"
        + parts
        + _lake_lag_html(lake_lag)
        + "<h2>Configs</h2>"
        + conf
    )
    return page(f"Topic {topic}", body, _LIVE_TABLE_JS)


def _lake_lag_html(lags: Sequence[LakeLag]) -> str:
    if not lags:
        return ""
    unknown = "<span class='muted'>unknown</span>"
    rows = [
        [
            esc(g.partition),
            esc(g.lag.records) if g.lag is not None else unknown,
            esc(f"{g.seconds:.1f}") if g.lag is not None else "",
            esc(g.lag.next_offset) if g.lag is not None else "",
            esc(g.rows) if g.rows is not None else "-",
            esc(g.dead) if g.dead is not None else "-",
            esc(g.leader) if g.leader >= 0 else "none",
        ]
        for g in lags
    ]
    return (
        "<h2>Iceberg translation lag</h2>"
        + table(
            [
                "Partition",
                "Records not in the table",
                "Seconds behind",
                "Next offset in the table",
                "Rows",
                "Dead letters",
                "Translated by",
            ],
            rows,
            "lake-lag",
        )
        + "<p class='muted'>Each partition as its leader translates it. Rows and dead letters are counted "
        "by the translating broker since its translation started: '-' for the partitions led elsewhere "
        "(their leader's console and /metrics have them).</p>"
    )


def partition_page(topic: str, p: PartitionRow, messages: str) -> str:
    """``messages``: the message browser's form and results (`message_pages`), HTML already."""
    facts = table(
        ["Leader", "Leader epoch", "Replicas", "ISR"],
        [[esc(p.leader), esc(p.leader_epoch), esc(",".join(map(str, p.replicas))),
          esc(",".join(map(str, p.isr)))]],
    )  # fmt: skip
    body = facts
    if p.local is None:
        body += (
            "<p class='muted'>This broker holds no replica of this partition: the messages below are read "
            "from its leader.</p>"
        )
    else:
        log = p.local
        offsets = table(
            ["Role here", "Log start", "Log end", "High watermark", "Last stable", "Size", "Segments"],
            [[esc(log.role), esc(log.log_start), esc(log.log_end), esc(log.high_watermark),
              esc(log.last_stable), esc(f"{log.size:,} B"), esc(len(log.segments))]],
            "offsets",
        )  # fmt: skip
        segments = table(
            ["Base offset", "Next offset", "Bytes"],
            [[esc(a), esc(b), esc(f"{c:,}")] for a, b, c in log.segments],
            "segments",
        )
        body += "<h2>Log on this broker</h2>" + offsets
        if log.remote is not None:  # tiered: the offsets below the local log start are in remote storage
            r = log.remote
            body += "<h2>Remote log (tiered storage)</h2>" + table(
                ["Remote log start", "Highest remote offset", "Local log start", "Size", "Segments"],
                [[esc(r.log_start), esc(r.last_offset), esc(log.log_start), esc(f"{r.size:,} B"),
                  esc(r.segments)]],
                "remote-log",
            )  # fmt: skip
        body += "<h2>Segments</h2>" + segments
    return page(f"Partition {topic}-{p.partition}", body + "<h2>Messages</h2>" + messages)


def groups_page(groups: list[GroupRow], unanswered: list[int] | None = None) -> str:
    rows = [
        [link(f"/ui/groups/{quote(g.group_id, safe='')}", g.group_id), esc(g.group_type), esc(g.state),
         esc(g.members), esc(_or_dash(g.lag))]
        for g in groups
    ]  # fmt: skip
    note = (
        "<p class='muted'>Groups of every broker (a group lives on its coordinator, the leader of its "
        "__consumer_offsets partition; other brokers' groups are listed with ListGroups and DescribeGroups). "
        "Lag, for the groups this broker coordinates: the sum over the group's partitions of the high "
        "watermark minus the committed offset; open a group for its lag per partition.</p>"
    )
    if unanswered:
        missing = ", ".join(map(str, unanswered))
        note += (
            f"<p class='bad' id='unanswered'>Brokers {esc(missing)} did not answer: their groups are "
            "missing.</p>"
        )
    header = ["Group", "Type", "State", "Members", "Lag"]
    return page("Consumer groups", table(header, rows, "groups") + note)


def group_page(
    view: GroupView, charts: str = "", actions: str = "", coordinator: int | None = None, spark: str = ""
) -> str:
    """A group's page; ``spark``: its Spark query's section (`spark_queries`), if it is one's."""
    facts = table(
        ["Type", "State", "Protocol type", "Assignor", "Generation", "Members", "Total lag"],
        [[esc(view.group_type), esc(view.state), esc(view.protocol_type or "-"), esc(view.protocol or "-"),
          esc(view.generation if view.generation >= 0 else "-"), esc(len(view.members)),
          esc(_or_dash(sum(o.lag for o in view.offsets if o.lag is not None) if view.offsets else None))]],
        "group-facts",
    )  # fmt: skip
    members = table(
        ["Member", "Client id", "Host", "Assignment"],
        [
            [esc(m.member_id), esc(m.client_id), esc(m.host), esc(_assignment(m.assignment))]
            for m in view.members
        ],
        "members",
    )  # fmt: skip
    offsets = table(
        ["Topic", "Partition", "Committed", "Log end", "Lag", "Owner"],
        [
            [link(topic_path(o.topic, o.partition), o.topic), esc(o.partition), esc(o.committed),
             esc(_or_dash(o.log_end)), esc(_or_dash(o.lag)), esc(o.owner or "-")]
            for o in view.offsets
        ],
        "lag",
    )  # fmt: skip
    lag_note = (
        "<p class='muted'>Log end: the high watermark (of the replica here, else the leader's as last "
        "learned; '-' until its leader answered).</p>"
    )
    if view.group_type == "share":
        lag_note = (
            "<p class='muted' id='share-note'>A share group (KIP-932): Committed is the share-partition "
            "start offset and Lag the records not yet acknowledged or archived, for the partitions this "
            "broker leads ('-' for the others: open this page on their leader's console); a partition "
            "may be assigned to several members.</p>"
        )
    chart = "<h2>Lag over time</h2>" + charts if charts else ""
    if coordinator is not None:
        where = f"<p class='muted' id='coordinator'>Coordinated by broker {esc(coordinator)}"
        if not charts:
            where += " (its lag chart is kept there: open this page on that broker)"
        actions = where + ".</p>" + actions
    body = (
        actions
        + facts
        + spark
        + chart
        + "<h2>Members</h2>"
        + members
        + "<h2>Offsets and lag</h2>"
        + offsets
        + lag_note
    )
    return page(f"Group {view.group_id}", body)


def _assignment(assignment: dict[str, list[int]]) -> str:
    return "; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in sorted(assignment.items())) or "-"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
