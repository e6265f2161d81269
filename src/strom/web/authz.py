"""What each HTTP request may do, by the broker's ACLs (with ``authorizer.class.name`` set).

The principal is the one `web.auth` left on the request; the host is the client's IP address (the one
a broker forwarding the request names, `strom.web.forwarded`); the
decision is the Kafka listeners' own (`strom.broker.authorization.Authorizer`: super users, DENY beats
ALLOW, implied DESCRIBE, prefixes, ``allow.everyone.if.no.acl.found``). Without an authorizer every
request is allowed, as on the Kafka listeners.

* **Schema registry.** Subjects are resources of their own, type ``Subject`` (`ResourceType.SUBJECT`):
  reading a subject's versions, looking a schema up in it and compatibility checks need READ on it,
  registering WRITE, deleting DELETE, its config and mode DESCRIBE_CONFIGS / ALTER_CONFIGS; the global
  config and mode DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster. A schema by id needs READ on one of
  the subjects it is registered under (what a deserializer has). Lists (``/subjects``, ``/schemas``, an
  id's subjects and versions) show only the subjects the principal may DESCRIBE (which READ, WRITE and
  DELETE imply), as ListGroups lists only the groups one may describe. Refusals are 403 with
  ``{"error_code": 40301, "message": "User is denied operation Write on Subject: orders-value"}``,
  Confluent's code for it.
* **Console.** A topic's pages need DESCRIBE on the topic, its message browser READ; a group's page
  DESCRIBE on the group; the topic and group lists show only what the principal may DESCRIBE.
* **``/metrics``** needs DESCRIBE on the cluster, unless ``http.metrics.public=true`` opens it.

`registry_need` is the pure table from a request's method and route to the check it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from strom.acl.model import CLUSTER_NAME, AclOperation, ResourceType, pascal
from strom.broker.authorization import Authorizer
from strom.web.auth import CLIENT_HOST, PRINCIPAL

Read, Write, Delete = AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE
DescribeConfigs, AlterConfigs = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS

# (method, route) -> the operation on the route's {subject}.
_SUBJECT_ROUTES: dict[tuple[str, str], AclOperation] = {
    ("GET", "/subjects/{subject}/versions"): Read,
    ("GET", "/subjects/{subject}/versions/{version}"): Read,
    ("GET", "/subjects/{subject}/versions/{version}/schema"): Read,
    ("GET", "/subjects/{subject}/versions/{version}/referencedby"): Read,
    ("POST", "/subjects/{subject}"): Read,
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"): Read,
    ("POST", "/compatibility/subjects/{subject}/versions"): Read,
    ("POST", "/subjects/{subject}/versions"): Write,
    ("DELETE", "/subjects/{subject}/versions/{version}"): Delete,
    ("DELETE", "/subjects/{subject}"): Delete,
    ("GET", "/config/{subject}"): DescribeConfigs,
    ("PUT", "/config/{subject}"): AlterConfigs,
    ("DELETE", "/config/{subject}"): AlterConfigs,
    ("GET", "/mode/{subject}"): DescribeConfigs,
    ("PUT", "/mode/{subject}"): AlterConfigs,
    ("DELETE", "/mode/{subject}"): AlterConfigs,
}
# (method, route) -> the operation on the cluster (the registry-wide settings).
_CLUSTER_ROUTES: dict[tuple[str, str], AclOperation] = {
    ("GET", "/config"): DescribeConfigs,
    ("PUT", "/config"): AlterConfigs,
    ("DELETE", "/config"): AlterConfigs,
    ("GET", "/mode"): DescribeConfigs,
    ("PUT", "/mode"): AlterConfigs,
    ("DELETE", "/mode"): AlterConfigs,
}
SCHEMA_BY_ID_ROUTES = frozenset({"/schemas/ids/{id}", "/schemas/ids/{id}/schema"})
# Routes answering a list to cut down to the subjects the principal may describe.
FILTERED_ROUTES = frozenset(
    {"/subjects", "/schemas", "/schemas/ids/{id}/subjects", "/schemas/ids/{id}/versions"}
)


@dataclass(frozen=True, slots=True)
class Need:
    operation: AclOperation
    resource_type: ResourceType
    name: str

    def denial(self) -> dict[str, str | int]:
        """Confluent's answer to a refused registry call."""
        operation = pascal(self.operation.name)
        resource = pascal(self.resource_type.name)
        return {
            "error_code": 40301,
            "message": f"User is denied operation {operation} on {resource}: {self.name}",
        }


def registry_need(method: str, route: str, match_info: dict[str, str]) -> Need | None:
    """The check one registry call needs by its route; None: none (or a filtered list, or by id)."""
    operation = _SUBJECT_ROUTES.get((method, route))
    if operation is not None:
        return Need(operation, ResourceType.SUBJECT, match_info["subject"])
    operation = _CLUSTER_ROUTES.get((method, route))
    if operation is not None:
        return Need(operation, ResourceType.CLUSTER, CLUSTER_NAME)
    return None


def filter_subjects(route: str, result: Any, visible: Callable[[str], bool]) -> Any:
    """A list answer of a `FILTERED_ROUTES` route without the subjects that are not `visible`."""
    if route not in FILTERED_ROUTES or not isinstance(result, list):
        return result
    return [item for item in result if visible(item if isinstance(item, str) else str(item.get("subject")))]


class HttpAuthorizer:
    """The ACL checks of one request (everything allowed without an authorizer)."""

    def __init__(self, authorizer: Callable[[], Authorizer | None]) -> None:
        self._authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self._authorizer() is not None

    def allowed(self, request: web.Request, need: Need) -> bool:
        authorizer = self._authorizer()
        if authorizer is None:
            return True
        principal = str(request.get(PRINCIPAL, "User:ANONYMOUS"))
        host = str(request.get(CLIENT_HOST) or request.remote or "")
        return authorizer.allowed(principal, host, need.operation, need.resource_type, need.name)

    def visible(self, request: web.Request, resource_type: ResourceType) -> Callable[[str], bool]:
        """Whether the principal may DESCRIBE a resource of this type, by name."""
        return lambda name: self.allowed(request, Need(AclOperation.DESCRIBE, resource_type, name))

    def registry_denial(self, request: web.Request, subjects_of_id: Callable[[int], Iterable[str]]) -> Any:
        """The 403 body for a registry call the principal may not make; None: it may."""
        if not self.enabled:
            return None
        info = request.match_info
        route = info.route.resource.canonical if info.route.resource is not None else request.path
        need = registry_need(request.method, route, dict(info))
        if need is not None:
            return None if self.allowed(request, need) else need.denial()
        if route in SCHEMA_BY_ID_ROUTES and info["id"].isdigit():
            subjects = list(subjects_of_id(int(info["id"])))
            if subjects and not any(
                self.allowed(request, Need(Read, ResourceType.SUBJECT, s)) for s in subjects
            ):
                return Need(Read, ResourceType.SUBJECT, subjects[0]).denial()
        return None

    def registry_filter(self, request: web.Request, result: Any) -> Any:
        if not self.enabled:
            return result
        info = request.match_info
        route = info.route.resource.canonical if info.route.resource is not None else request.path
        return filter_subjects(route, result, self.visible(request, ResourceType.SUBJECT))


def metrics_middleware(authz: HttpAuthorizer, public: bool) -> Any:
    """``/metrics`` needs DESCRIBE on the cluster unless it is public."""
    need = Need(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/metrics" and not public and not authz.allowed(request, need):
            return web.json_response(
                {"error_code": 403, "message": "/metrics needs Describe on the cluster"}, status=403
            )
        response: web.StreamResponse = await handler(request)
        return response

    return guard
