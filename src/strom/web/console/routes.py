"""``/ui/``: the console's routes on the broker's HTTP listener (docs/console.md lists the pages).

Pages are rendered from in-memory state on the event loop (views.py and the page modules); the message
browser reads a bounded amount of a partition, from the replica here or from the leader (scan.py,
remote.py); the charts draw the metric history (sampler.py, dashboards.py). ``/ui/api/topics/<topic>/table``
answers the topic page's poll with the broker table's HTML, so the table follows leader moves and ISR
changes live. ``/ui/actions/<action>`` is an action's form (GET) and its confirmation and execution
(POST, actions.py). Each page checks the person's rights first (`strom.web.authz`); a path under
``/ui/`` that names nothing is a 404 page; a topic, partition, group or subject that does not exist is
a 404 page saying so. Every page's footer names the broker that answered and the principal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import quote

from aiohttp import web

from strom.acl.model import CLUSTER_NAME, AclBindingFilter, AclOperation, ResourceType
from strom.broker.broker import Broker
from strom.metrics.history import MetricHistory
from strom.protocol.errors import KafkaError
from strom.web.auth import PRINCIPAL
from strom.web.authz import HttpAuthorizer, Need
from strom.web.console import (
    action_pages,
    actions,
    dashboards,
    message_pages,
    pages,
    registry_pages,
    security_pages,
    share_views,
    spark_queries,
    views,
)
from strom.web.console.decode import RecordDecoder
from strom.web.console.lake_lag import is_iceberg_topic, topic_lake_lag
from strom.web.console.remote import LeaderReads, RemoteReadError, RemoteSource
from strom.web.console.remote_groups import ClusterGroups
from strom.web.console.remote_txns import ClusterTransactions, local_row
from strom.web.console.sampler import HistorySampler
from strom.web.console.scan import LocalSource, PartitionSource, Query, scan

_HTML = "text/html"


class ConsoleApi:
    def __init__(
        self, broker: Broker, authz: HttpAuthorizer | None = None, sampler: HistorySampler | None = None
    ) -> None:
        """``authz``: the ACL checks of each page (`strom.web.authz`); None allows everything.
        ``sampler``: the metric history the charts draw (none: pages without charts)."""
        self._broker = broker
        self._state = views.ConsoleState()
        self._authz = authz
        self._sampler = sampler
        self._leader_reads = LeaderReads(broker)
        self._runner = actions.ActionRunner(broker, self._leader_reads)
        self._cluster_groups = ClusterGroups(broker, self._leader_reads)
        self._cluster_txns = ClusterTransactions(broker, self._leader_reads)
        self._csrf = actions.CsrfTokens()

    def close(self) -> None:
        """Closes the connections to the leaders the message browser read from."""
        self._leader_reads.close()
        self._runner.close()

    def _page(self, request: web.Request, text: str, status: int = 200) -> web.Response:
        principal = request.get(PRINCIPAL)
        text = pages.answered_by(text, self._broker.node_id, None if principal is None else str(principal))
        return web.Response(text=text, status=status, content_type=_HTML, charset="utf-8")

    def _forbidden(self, request: web.Request, what: str) -> web.Response:
        return self._page(request, pages.forbidden(what), 403)

    def _remote(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return self._sampler.remote_watermarks(wanted) if self._sampler is not None else {}

    def _charts(self, draw: Callable[[MetricHistory, int], str]) -> str:
        if self._sampler is None:
            return ""
        return draw(self._sampler.history, self._broker.clock.time_ms())

    def _may(
        self, request: web.Request, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return self._authz is None or self._authz.allowed(request, Need(operation, resource_type, name))

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui", self.redirect),
            web.get("/ui/", self.cluster),
            web.get("/ui/topics", self.topics),
            web.get("/ui/topics/{topic}", self.topic),
            web.get("/ui/topics/{topic}/{partition:-?[0-9]+}", self.partition),
            web.get("/ui/api/topics/{topic}/table", self.topic_table),
            web.get("/ui/groups", self.groups),
            web.get("/ui/groups/{group}", self.group),
            web.get("/ui/schemas", self.schemas),
            web.get("/ui/schemas/{subject}", self.subject),
            web.get("/ui/acls", self.acls),
            web.get("/ui/users", self.users),
            web.get("/ui/transactions", self.transactions),
            web.get("/ui/quotas", self.quotas),
            web.get("/ui/actions/{action}", self.action_form),
            web.post("/ui/actions/{action}", self.action),
            web.get("/ui/{tail:.*}", self.unknown),
        ]

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": "/ui/"})

    async def cluster(self, request: web.Request) -> web.Response:
        node = self._broker.node_id
        charts = self._charts(lambda h, now: dashboards.cluster_charts(h, now, node))
        view = views.cluster_view(
            self._broker,
            self._state,
            lambda t: self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, t),
        )
        return self._page(request, pages.cluster_page(view, charts))

    async def topics(self, request: web.Request) -> web.Response:
        rows = views.topic_rows(self._broker, self._state)
        rows = [r for r in rows if self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, r.name)]
        links = action_pages.action_links([("create-topic", "create a topic", "")])
        return self._page(request, pages.topics_page(rows, links))

    async def topic(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        if not self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            return self._forbidden(request, f"You may not describe topic {name!r}.")
        info = self._broker.metadata.topics.get(name)
        if info is None:
            return self._page(request, pages.not_found(f"Topic {name!r} does not exist."), 404)
        table = views.topic_table(self._broker, self._state, name)
        parts = views.partition_rows(self._broker, name)
        src = f"/ui/api/topics/{quote(name, safe='')}/table"
        charts = self._charts(lambda h, now: dashboards.topic_charts(h, now, name))
        q = "topic=" + quote(name, safe="")
        links = action_pages.action_links(
            [("add-partitions", "add partitions", q), ("alter-config", "alter a config", q),
             ("delete-records", "delete records", q)]
        )  # fmt: skip
        lake_lag = (
            await topic_lake_lag(self._broker, self._leader_reads, name, len(parts))
            if is_iceberg_topic(self._broker, name)
            else []
        )
        page = pages.topic_page(name, dict(info.configs), table, parts, src, charts, links, lake_lag)
        return self._page(request, page)

    async def topic_table(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        if not self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            return web.json_response({"error": f"you may not describe topic {name!r}"}, status=403)
        if name not in self._broker.metadata.topics:
            return web.json_response({"error": f"topic {name!r} does not exist"}, status=404)
        table = views.topic_table(self._broker, self._state, name)
        return web.json_response({"html": pages.broker_table_html(table), "updated": time.time()})

    async def partition(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        index = int(request.match_info["partition"])
        if not self._may(request, AclOperation.READ, ResourceType.TOPIC, name):
            return self._forbidden(request, f"You may not read topic {name!r}.")
        rows = [p for p in views.partition_rows(self._broker, name) if p.partition == index]
        if not rows:
            return self._page(request, pages.not_found(f"Partition {name}-{index} does not exist."), 404)
        raw = dict(request.query)
        path = pages.topic_path(name, index)
        try:
            query = message_pages.parse_query(raw)
        except message_pages.BadQuery as exc:
            messages = (
                message_pages.form(Query(), raw) + f"<p class='bad' id='scan-error'>{pages.esc(exc)}</p>"
            )
            return self._page(request, pages.partition_page(name, rows[0], messages), 400)
        hosted = self._broker.replica_manager.partitions.get((name, index))
        source: PartitionSource = (
            LocalSource(hosted.log) if hosted is not None else RemoteSource(self._leader_reads, name, index)
        )
        messages = message_pages.form(query, raw)
        try:
            found = await scan(source, query)
        except (KafkaError, RemoteReadError) as exc:
            failed = f"Could not read {name}-{index}: {exc}"
            messages += f"<p class='bad' id='scan-error'>{pages.esc(failed)}</p>"
        else:
            messages += message_pages.results(found, RecordDecoder(self._broker.registry.registry), path)
        if hosted is not None:
            producers = self._broker.replica_manager.active_producers(name, index)
            messages += "<h2>Producers</h2>" + security_pages.producers_html(name, index, producers)
        return self._page(request, pages.partition_page(name, rows[0], messages))

    async def groups(self, request: web.Request) -> web.Response:
        local = views.group_rows(self._broker, self._remote) + share_views.share_group_rows(self._broker)
        groups = local + await self._cluster_groups.rows()
        groups = [
            g for g in groups if self._may(request, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
        page = pages.groups_page(sorted(groups, key=lambda g: g.group_id), self._cluster_groups.failed)
        return self._page(request, page)

    async def group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        if not self._may(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return self._forbidden(request, f"You may not describe group {group_id!r}.")
        coordinator = self._broker.node_id
        view = views.group_view(self._broker, group_id, self._remote) or share_views.share_group_view(
            self._broker, group_id
        )
        if view is None:
            try:
                coordinator, host, port = await self._cluster_groups.coordinator(group_id)
                if coordinator != self._broker.node_id:
                    view = await self._cluster_groups.view(group_id, coordinator, host, port)
            except RemoteReadError as exc:
                failed = f"Could not reach group {group_id!r}'s coordinator: {exc}"
                return self._page(
                    request, pages.page("Unavailable", f"<p class='bad'>{pages.esc(failed)}</p>"), 503
                )
        if view is None:
            return self._page(request, pages.not_found(f"Group {group_id!r} does not exist."), 404)
        charts = ""
        if coordinator == self._broker.node_id:
            charts = self._charts(lambda h, now: dashboards.group_charts(h, now, group_id))
        topics = sorted({o.topic for o in view.offsets})
        q = f"group={quote(group_id, safe='')}" + (f"&topic={quote(topics[0], safe='')}" if topics else "")
        links = (
            action_pages.action_links([("reset-offsets", "reset offsets (group must be empty)", q)])
            if view.group_type != "share"  # a share group has no committed offsets to reset
            else ""
        )
        spark = spark_queries.spark_section(view.offsets)
        return self._page(request, pages.group_page(view, charts, links, coordinator, spark))

    async def schemas(self, request: web.Request) -> web.Response:
        registry = self._broker.registry.registry
        subjects = [
            s
            for s in registry.subjects()
            if self._may(request, AclOperation.DESCRIBE, ResourceType.SUBJECT, s)
        ]
        return self._page(request, registry_pages.subjects_page(registry, subjects))

    async def subject(self, request: web.Request) -> web.Response:
        subject = request.match_info["subject"]
        if not self._may(request, AclOperation.READ, ResourceType.SUBJECT, subject):
            return self._forbidden(request, f"You may not read subject {subject!r}.")
        registry = self._broker.registry.registry
        if not registry.state.versions(subject, deleted=True):
            return self._page(request, pages.not_found(f"Subject {subject!r} does not exist."), 404)
        query = request.query
        pair = (
            query.get("diff", "").split(",") if "diff" in query else [query.get("a", ""), query.get("b", "")]
        )
        diff = (
            (int(pair[0]), int(pair[1]))
            if len(pair) == 2 and all(p.strip().isdigit() for p in pair)
            else None
        )
        version = query.get("version", "")
        shown = int(version) if version.isdigit() else None
        return self._page(request, registry_pages.subject_page(registry, subject, shown, diff))

    def _may_describe_cluster(self, request: web.Request) -> bool:
        return self._may(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    async def acls(self, request: web.Request) -> web.Response:
        if not self._may_describe_cluster(request):
            return self._forbidden(request, "Listing ACLs needs Describe on the cluster.")
        authorizer = self._broker.authorizer
        bindings = None if authorizer is None else authorizer.describe(AclBindingFilter())
        return self._page(request, security_pages.acls_page(bindings))

    async def users(self, request: web.Request) -> web.Response:
        if not self._may_describe_cluster(request):
            return self._forbidden(request, "Listing SCRAM users needs Describe on the cluster.")
        return self._page(request, security_pages.users_page(self._broker.credentials.describe()))

    async def transactions(self, request: web.Request) -> web.Response:
        node = self._broker.node_id
        txns = [local_row(t, node) for t in self._broker.transactions.coordinator.txns.values()]
        txns += await self._cluster_txns.rows()
        txns = [
            t
            for t in txns
            if self._may(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
        ]
        now = self._broker.clock.time_ms()
        return self._page(request, security_pages.transactions_page(txns, now, self._cluster_txns.failed))

    async def quotas(self, request: web.Request) -> web.Response:
        if not self._may(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
            return self._forbidden(request, "Client quotas need DescribeConfigs on the cluster.")
        quotas = self._broker.quotas
        now = self._broker.clock.time_ms()
        throttles = [(k, u, c, s.throttle_time_avg(now)) for k, u, c, s in quotas.sensors()]
        return self._page(request, security_pages.quotas_page(quotas.quotas, throttles))

    def _principal(self, request: web.Request) -> str:
        return str(request.get(PRINCIPAL, "User:ANONYMOUS"))

    async def action_form(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action not in action_pages.FORMS:
            return self._page(request, pages.not_found(f"No action {action!r}."), 404)
        token = self._csrf.token(self._principal(request))
        return self._page(request, action_pages.form_page(action, dict(request.query), token))

    async def action(self, request: web.Request) -> web.Response:
        """A POSTed action: CSRF and origin checks, the person's rights, then confirm or act."""
        action = request.match_info["action"]
        if action not in action_pages.FORMS:
            return self._page(request, pages.not_found(f"No action {action!r}."), 404)
        origin = request.headers.get("Origin")
        if origin is not None and origin != "null" and origin.split("://", 1)[-1] != request.host:
            return self._forbidden(request, "This action was posted from another site.")
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        principal = self._principal(request)
        if not self._csrf.valid(principal, form.get("csrf", "")):
            return self._forbidden(
                request, "This form has expired or was not made by this console: reload it."
            )
        for alternatives in actions.needs(action, form):
            if not any(self._may(request, n.operation, n.resource_type, n.name) for n in alternatives):
                need = alternatives[-1]
                what = f"{need.operation.name} on {need.resource_type.name} {need.name!r}"
                return self._forbidden(request, f"{action_pages.FORMS[action][0]} needs {what}.")
        try:
            if form.get("confirm") != "yes":
                described = actions.describe(action, form)
                return self._page(request, action_pages.confirm_page(action, described, form, form["csrf"]))
            done = await self._runner.run(action, form)
        except actions.ActionError as exc:
            return self._page(request, action_pages.result_page(action, False, str(exc), form), 400)
        return self._page(request, action_pages.result_page(action, True, done, form))

    async def unknown(self, request: web.Request) -> web.Response:
        return self._page(request, pages.not_found(f"No console page at {request.path}."), 404)
