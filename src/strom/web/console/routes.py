"""``/ui/``: the console's routes on the broker's HTTP listener (read-only).

Pages are rendered from in-memory state on the event loop (views.py, pages.py); only the message
browser reads the log files, a bounded amount (browser.py). ``/ui/api/topics/<topic>/table`` answers
the topic page's poll with the broker table's HTML, so the table follows leader moves and ISR changes
live. A path under ``/ui/`` that names nothing is a 404 page; a topic, partition or group that does not
exist is a 404 page saying so.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from aiohttp import web

from strom.acl.model import AclOperation, ResourceType
from strom.broker.broker import Broker
from strom.web.authz import HttpAuthorizer, Need
from strom.web.console import pages, views
from strom.web.console.browser import latest_records

_HTML = "text/html"


def _page(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type=_HTML, charset="utf-8")


def _forbidden(what: str) -> web.Response:
    return _page(pages.forbidden(what), 403)


class ConsoleApi:
    def __init__(self, broker: Broker, authz: HttpAuthorizer | None = None) -> None:
        """``authz``: the ACL checks of each page (`strom.web.authz`); None allows everything."""
        self._broker = broker
        self._state = views.ConsoleState()
        self._authz = authz

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
            web.get("/ui/{tail:.*}", self.unknown),
        ]

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": "/ui/"})

    async def cluster(self, request: web.Request) -> web.Response:
        return _page(pages.cluster_page(views.cluster_view(self._broker, self._state)))

    async def topics(self, request: web.Request) -> web.Response:
        rows = views.topic_rows(self._broker, self._state)
        rows = [r for r in rows if self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, r.name)]
        return _page(pages.topics_page(rows))

    async def topic(self, request: web.Request) -> web.Response:
        name = request.match_info["topic"]
        if not self._may(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            return _forbidden(f"You may not describe topic {name!r}.")
        info = self._broker.metadata.topics.get(name)
        if info is None:
            return _page(pages.not_found(f"Topic {name!r} does not exist."), 404)
        table = views.topic_table(self._broker, self._state, name)
        parts = views.partition_rows(self._broker, name)
        src = f"/ui/api/topics/{quote(name, safe='')}/table"
        return _page(pages.topic_page(name, dict(info.configs), table, parts, src))

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
            return _forbidden(f"You may not read topic {name!r}.")
        rows = [p for p in views.partition_rows(self._broker, name) if p.partition == index]
        if not rows:
            return _page(pages.not_found(f"Partition {name}-{index} does not exist."), 404)
        try:
            wanted = int(request.query.get("n", "20"))
        except ValueError:
            wanted = 20
        records = latest_records(self._broker, name, index, wanted)
        return _page(pages.partition_page(name, rows[0], records, wanted))

    async def groups(self, request: web.Request) -> web.Response:
        groups = views.group_ids(self._broker)
        groups = [g for g in groups if self._may(request, AclOperation.DESCRIBE, ResourceType.GROUP, g[0])]
        return _page(pages.groups_page(groups))

    async def group(self, request: web.Request) -> web.Response:
        group_id = request.match_info["group"]
        if not self._may(request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return _forbidden(f"You may not describe group {group_id!r}.")
        view = views.group_view(self._broker, group_id)
        if view is None:
            return _page(
                pages.not_found(
                    f"Group {group_id!r} does not exist on this broker (it may be coordinated by another "
                    "broker: see strom groups describe)."
                ),
                404,
            )
        return _page(pages.group_page(view))

    async def unknown(self, request: web.Request) -> web.Response:
        return _page(pages.not_found(f"No console page at {request.path}."), 404)
