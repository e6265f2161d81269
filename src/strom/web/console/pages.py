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
from strom.web.console.browser import BrowsedRecord
from strom.web.console.views import ClusterView, GroupView, PartitionRow, TopicRow

_STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#222}
nav{background:#1f3a5f;padding:.6em 1em}nav a{color:#fff;margin-right:1.2em;text-decoration:none}
main{padding:1em 1.5em}table{border-collapse:collapse;margin:.5em 0 1.2em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#eef2f7}
.leader{font-weight:bold;color:#0a6b2d}.moved{font-weight:bold;color:#b36b00}
.outofsync{color:#b00020;text-decoration:line-through}.down{color:#b00020}
.bad{color:#b00020;font-weight:bold}.ok{color:#0a6b2d}.muted{color:#777}
pre{margin:0;white-space:pre-wrap;max-width:60em}
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
        for p, t in (("/ui/", "Cluster"), ("/ui/topics", "Topics"), ("/ui/groups", "Consumer groups"))
    )
    js = f"<script>{script}</script>" if script else ""
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)} · Strom</title>"
        f"<style>{_STYLE}</style></head><body><nav><b style='color:#fff;margin-right:1.5em'>Strom</b>"
        f"{nav}</nav><main><h1>{esc(title)}</h1>{body}</main>{js}</body></html>"
    )


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


def cluster_page(view: ClusterView) -> str:
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
    return page("Cluster", facts + "<h2>Brokers</h2>" + brokers + "<h2>Health</h2>" + health)


def topics_page(rows: list[TopicRow]) -> str:
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
    return page("Topics", body + note)


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
    topic: str, configs: dict[str, str], bt: BrokerTable, partitions: list[PartitionRow], table_src: str
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
        "<h2>Brokers and replicas</h2>"
        + live
        + legend
        + "<h2>Partitions</h2>"
        + parts
        + "<h2>Configs</h2>"
        + conf
    )
    return page(f"Topic {topic}", body, _LIVE_TABLE_JS)


def partition_page(topic: str, p: PartitionRow, records: list[BrowsedRecord] | None, wanted: int) -> str:
    facts = table(
        ["Leader", "Leader epoch", "Replicas", "ISR"],
        [
            [
                esc(p.leader),
                esc(p.leader_epoch),
                esc(",".join(map(str, p.replicas))),
                esc(",".join(map(str, p.isr))),
            ]
        ],
    )
    if p.local is None:
        return page(
            f"Partition {topic}-{p.partition}",
            facts + "<p class='muted'>This broker holds no replica of this partition: its log and "
            "records are on the brokers listed as replicas.</p>",
        )
    log = p.local
    offsets = table(
        ["Role here", "Log start", "Log end", "High watermark", "Last stable", "Size", "Segments"],
        [[esc(log.role), esc(log.log_start), esc(log.log_end), esc(log.high_watermark), esc(log.last_stable),
          esc(f"{log.size:,} B"), esc(len(log.segments))]],
        "offsets",
    )  # fmt: skip
    segments = table(
        ["Base offset", "Next offset", "Bytes"],
        [[esc(a), esc(b), esc(f"{c:,}")] for a, b, c in log.segments],
    )
    browsed = table(
        ["Offset", "Timestamp", "Key", "Value", "Headers"],
        [
            [
                esc(r.offset),
                esc(r.timestamp),
                f"<pre>{esc(r.key)}</pre>",
                f"<pre>{esc(r.value)}</pre>",
                esc(r.headers),
            ]
            for r in records or []
        ],
        "messages",
    )
    form = (
        f"<form method='get'>Latest <input name='n' value='{wanted}' size='4'> records "
        "<button>Show</button></form>"
    )
    body = (
        facts
        + "<h2>Log on this broker</h2>"
        + offsets
        + "<h2>Segments</h2>"
        + segments
        + "<h2>Messages</h2>"
        + form
        + browsed
    )
    return page(f"Partition {topic}-{p.partition}", body)


def groups_page(groups: list[tuple[str, str, int]]) -> str:
    rows = [[link(f"/ui/groups/{quote(g, safe='')}", g), esc(state), esc(n)] for g, state, n in groups]
    note = (
        "<p class='muted'>Groups coordinated by this broker (a group lives on the leader of its "
        "__consumer_offsets partition).</p>"
    )
    return page("Consumer groups", table(["Group", "State", "Members"], rows, "groups") + note)


def group_page(view: GroupView) -> str:
    facts = table(
        ["State", "Protocol type", "Assignor", "Generation"],
        [[esc(view.state), esc(view.protocol_type or "-"), esc(view.protocol or "-"), esc(view.generation)]],
    )
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
    return page(
        f"Group {view.group_id}", facts + "<h2>Members</h2>" + members + "<h2>Offsets and lag</h2>" + offsets
    )


def _assignment(assignment: dict[str, list[int]]) -> str:
    return "; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in sorted(assignment.items())) or "-"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
