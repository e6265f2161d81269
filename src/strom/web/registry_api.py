"""Confluent Schema Registry's REST API on the broker's HTTP listener (routes mounted on `HttpServer`).

Each handler parses the path, query and body, then calls the sans-I/O `SchemaRegistry` (reads) or
`RegistryService.write` (writes). Bodies are JSON with content type
``application/vnd.schemaregistry.v1+json`` (``application/vnd.schemaregistry+json``,
``application/json`` and ``application/octet-stream`` are accepted too, as Confluent's server does);
every error is ``{"error_code": ..., "message": ...}`` with Confluent's codes (`strom.registry.errors`).
``?format=serialized`` on a schema read answers a Protobuf schema as the base64 ``FileDescriptorProto``
that confluent-kafka's ProtobufDeserializer builds its descriptor pool from.

Routing in a cluster: a write reaching a broker that is not the writer (leader of ``_schemas``-0) is
forwarded to the writer's URL, with its method, path, query and body, and the writer's answer is
relayed (every broker answers reads from its own copy of the state). A forwarded request carries
``X-Strom-Forwarded`` so that it is never forwarded twice (50003 instead). To an ``https://`` writer
the forward checks the certificate against the HTTP listener's trust store (``ssl.truststore.*``,
overridable as ``listener.name.http.ssl.*``) and presents its key store if it has one. The forward is
the user's: the same Basic credentials, or, for a user who logged in with a client certificate, the
broker's own login naming that user (`strom.web.forwarded`), so the writer authorizes the same principal.

Read-your-writes through any broker: the writer's answer to a write carries ``X-Strom-Schemas-Offset``
(its high watermark once the write is committed); the broker that forwarded it waits (briefly, bounded)
until its own replica has replayed that far before relaying the answer. And a read that misses (404)
on a broker that is not the writer is confirmed with the writer before the 404 is given, because a
follower learns of committed records a fetch round later than the writer.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from strom._util.json_types import JsonObject
from strom.broker.coordinators.registry_service import RegistryService
from strom.broker.security.listeners import ANONYMOUS
from strom.registry import errors
from strom.registry.errors import RegistryError, parse_version
from strom.registry.formats import SCHEMA_TYPES
from strom.registry.records import Reference, SchemaValue
from strom.registry.registry import SchemaRegistry, SchemaRequest, Write
from strom.web.auth import PRINCIPAL
from strom.web.authz import HttpAuthorizer
from strom.web.forwarded import CLIENT_HOST_HEADER, PRINCIPAL_HEADER, encode_principal
from strom.web.server import JSON_CONTENT_TYPE, json_response

log = logging.getLogger(__name__)

ACCEPTED_CONTENT_TYPES = frozenset(
    {JSON_CONTENT_TYPE, "application/vnd.schemaregistry+json", "application/json", "application/octet-stream"}
)
FORWARDED_HEADER = "X-Strom-Forwarded"
OFFSET_HEADER = "X-Strom-Schemas-Offset"  # a write's answer: the _schemas offset the writer had committed
FORWARD_TIMEOUT_S = 30.0

Decide = Callable[[SchemaRegistry], Write]


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def _schema_id(request: web.Request) -> int:
    text = request.match_info["id"]
    if not text.isdigit():
        raise errors.schema_not_found(text)
    return int(text)


def _version_body(value: SchemaValue, schema: str | None = None) -> JsonObject:
    body: JsonObject = {
        "subject": value.subject,
        "version": value.version,
        "id": value.schema_id,
        "schema": value.schema if schema is None else schema,
    }
    if value.schema_type != "AVRO":
        body["schemaType"] = value.schema_type
    if value.references:
        body["references"] = [r.to_json() for r in value.references]
    return body


async def _json_body(request: web.Request) -> Any:
    if request.content_type not in ACCEPTED_CONTENT_TYPES:
        raise errors.bad_request(415, f"HTTP 415 Unsupported Media Type: {request.content_type}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise errors.bad_request(413, f"HTTP 413 Request Entity Too Large: {exc.text}") from None
    try:
        return json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.bad_request(400, f"The request body is not valid JSON: {exc}") from None


def _schema_request(body: Any, normalize: bool = False) -> SchemaRequest:
    if not isinstance(body, dict):
        raise errors.bad_request(422, "The request body must be a JSON object")
    schema = body.get("schema")
    if not isinstance(schema, str) or not schema.strip():
        raise errors.invalid_schema("the request has no schema (a string in the field 'schema')")
    schema_type = body.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str):
        raise errors.invalid_schema(f"schemaType {schema_type!r} is not a string")
    refs = body.get("references") or []
    try:
        references = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in refs)
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.invalid_schema(f"references must have a name, a subject and a version: {exc}") from None
    schema_id, version = body.get("id"), body.get("version")
    for name, value in (("id", schema_id), ("version", version)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise errors.bad_request(422, f"{name} must be a number")
    return SchemaRequest(schema, schema_type.upper(), references, schema_id, version, normalize)


class RegistryApi:
    def __init__(
        self,
        service: RegistryService,
        forward_tls: ssl.SSLContext | None = None,
        authz: HttpAuthorizer | None = None,
        forward_login: tuple[str, str] | None = None,
    ) -> None:
        """``forward_tls``: how this broker checks (and, with a key store, authenticates to) the
        writer's ``https://`` listener when it forwards a write: the HTTP listener's trust store,
        not the system's CAs (a cluster's private CA would fail every forward). ``authz``: the ACL
        checks (`strom.web.authz`), made here before a write is forwarded. ``forward_login``: the
        broker's inter-broker SASL user and password, its login when it forwards for a user who has no
        password (a client certificate); None: its key store's certificate is its login."""
        self.service = service
        self._forward_tls = forward_tls
        self._authz = authz
        self._forward_login = forward_login
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def routes(self) -> list[web.RouteDef]:
        r = self._route
        return [
            web.get("/", r(self.root)),
            web.get("/subjects", r(self.list_subjects)),
            web.get("/subjects/{subject}/versions", r(self.list_versions)),
            web.post("/subjects/{subject}/versions", r(self.register, write=True)),
            web.get("/subjects/{subject}/versions/{version}", r(self.get_version)),
            web.get("/subjects/{subject}/versions/{version}/schema", r(self.get_version_schema)),
            web.get("/subjects/{subject}/versions/{version}/referencedby", r(self.referenced_by)),
            web.delete("/subjects/{subject}/versions/{version}", r(self.delete_version, write=True)),
            web.post("/subjects/{subject}", r(self.lookup)),
            web.delete("/subjects/{subject}", r(self.delete_subject, write=True)),
            web.get("/schemas", r(self.list_schemas)),
            web.get("/schemas/types", r(self.schema_types)),
            web.get("/schemas/ids/{id}", r(self.get_schema)),
            web.get("/schemas/ids/{id}/schema", r(self.get_schema_text)),
            web.get("/schemas/ids/{id}/versions", r(self.get_schema_versions)),
            web.get("/schemas/ids/{id}/subjects", r(self.get_schema_subjects)),
            web.post("/compatibility/subjects/{subject}/versions/{version}", r(self.check_version)),
            web.post("/compatibility/subjects/{subject}/versions", r(self.check_all)),
            web.get("/config", r(self.get_config)),
            web.put("/config", r(self.put_config, write=True)),
            web.delete("/config", r(self.delete_config, write=True)),
            web.get("/config/{subject}", r(self.get_config)),
            web.put("/config/{subject}", r(self.put_config, write=True)),
            web.delete("/config/{subject}", r(self.delete_config, write=True)),
            web.get("/mode", r(self.get_mode)),
            web.put("/mode", r(self.put_mode, write=True)),
            web.get("/mode/{subject}", r(self.get_mode)),
            web.put("/mode/{subject}", r(self.put_mode, write=True)),
            web.delete("/mode/{subject}", r(self.delete_mode, write=True)),
        ]

    def _route(
        self, handler: Callable[[web.Request], Awaitable[Any]], write: bool = False
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """Wrap a handler: forwarding, then its answer (or RegistryError) as a JSON response."""

        async def serve(request: web.Request) -> web.StreamResponse:
            if self._authz is not None:
                denial = self._authz.registry_denial(request, self._subjects_of_id)
                if denial is not None:
                    return json_response(403, denial)
            try:
                forward_to = await self._forward_target(request, write)
                if forward_to is not None:
                    return await self._forward(request, forward_to)
                result = await handler(request)
                if self._authz is not None:
                    result = self._authz.registry_filter(request, result)
                response = result if isinstance(result, web.StreamResponse) else json_response(200, result)
                if write:
                    response.headers[OFFSET_HEADER] = str(self.service.committed_offset())
                return response
            except RegistryError as exc:
                if exc.status == 404 and not write and self._may_forward_miss(request):
                    # A follower may not have replayed a write the writer just acknowledged: a miss here
                    # is confirmed with the writer (read-your-writes through any broker).
                    return await self._forward(request, str(self.service.writer_url()))
                if exc.status >= 500:
                    log.warning("registry %s %s: %s", request.method, request.path_qs, exc.message)
                return json_response(exc.status, exc.body())

        return serve

    def _subjects_of_id(self, schema_id: int) -> list[str]:
        try:
            return [str(s) for s in self._registry.schema_subjects(schema_id, False)]
        except RegistryError:
            return []  # an unknown id: the handler answers 404

    def _may_forward_miss(self, request: web.Request) -> bool:
        svc = self.service
        return (
            not svc.is_writer and svc.writer_url() is not None and not request.headers.get(FORWARDED_HEADER)
        )

    async def _forward_target(self, request: web.Request, write: bool) -> str | None:
        svc = self.service
        if not write:
            svc.catch_up()
            return None
        if not svc.is_writer:
            await svc.ensure_writer_known()
        if svc.is_writer:
            return None
        target = svc.writer_url()
        if target is None:
            raise errors.forwarding_error("no registry writer is known yet; retry")
        if request.headers.get(FORWARDED_HEADER):
            raise errors.forwarding_error(f"the request was already forwarded once; the writer is {target}")
        return target

    async def _forward(self, request: web.Request, base_url: str) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S),
                connector=aiohttp.TCPConnector(ssl=self._forward_tls if self._forward_tls else True),
            )
        body = await request.read() if request.body_exists else None  # cached once a handler read it
        headers = {FORWARDED_HEADER: "1", "Accept": JSON_CONTENT_TYPE, **self._identity(request)}
        if body is not None:
            headers["Content-Type"] = request.headers.get("Content-Type", JSON_CONTENT_TYPE)
        try:
            async with self._session.request(
                request.method, base_url.rstrip("/") + request.path_qs, data=body, headers=headers
            ) as answer:
                payload = await answer.read()
                offset = answer.headers.get(OFFSET_HEADER, "")
            if answer.status == 200 and offset.isdigit():
                # Answer once this broker has replayed the write too, so that the client reads it here.
                await self.service.wait_replayed(int(offset))
            return web.Response(status=answer.status, body=payload, content_type=JSON_CONTENT_TYPE)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.forwarding_error(f"{base_url}: {exc or type(exc).__name__}") from None

    def _identity(self, request: web.Request) -> dict[str, str]:
        """The headers that make the writer authorize the same principal as this broker did."""
        if "Authorization" in request.headers:  # the writer checks the same user's password
            return {"Authorization": request.headers["Authorization"]}
        principal = str(request.get(PRINCIPAL, ANONYMOUS))
        if principal == ANONYMOUS:
            return {}
        # A certificate's user: the broker logs in as itself (its inter-broker login, else its key
        # store's certificate) and, with ACLs on, names the user.
        headers: dict[str, str] = {}
        if self._forward_login is not None:
            user, password = self._forward_login
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        if self._authz is not None and self._authz.enabled:
            headers[PRINCIPAL_HEADER] = encode_principal(principal)
            headers[CLIENT_HOST_HEADER] = request.remote or ""
        return headers

    @property
    def _registry(self) -> SchemaRegistry:
        return self.service.registry

    # --- reads -----------------------------------------------------------------------------------
    async def root(self, request: web.Request) -> Any:
        return {}

    async def list_subjects(self, request: web.Request) -> Any:
        return self._registry.subjects(_flag(request, "deleted"), request.query.get("subjectPrefix", ""))

    async def list_versions(self, request: web.Request) -> Any:
        return self._registry.versions(request.match_info["subject"], _flag(request, "deleted"))

    def _version(self, request: web.Request) -> SchemaValue:
        version = parse_version(request.match_info["version"])
        return self._registry.version(request.match_info["subject"], version, _flag(request, "deleted"))

    async def get_version(self, request: web.Request) -> Any:
        value = self._version(request)
        return _version_body(value, self._registry.formatted(value, request.query.get("format")))

    async def get_version_schema(self, request: web.Request) -> Any:
        return web.Response(text=self._version(request).schema, content_type=JSON_CONTENT_TYPE)

    async def referenced_by(self, request: web.Request) -> Any:
        value = self._version(request)
        return sorted(
            other.schema_id
            for versions in self._registry.state.subjects.values()
            for other in versions.values()
            if not other.deleted
            and any((r.subject, r.version) == (value.subject, value.version) for r in other.references)
        )

    async def lookup(self, request: web.Request) -> Any:
        schema_request = _schema_request(await _json_body(request), _flag(request, "normalize"))
        value = self._registry.lookup(
            request.match_info["subject"], schema_request, _flag(request, "deleted")
        )
        return _version_body(value)

    async def list_schemas(self, request: web.Request) -> Any:
        """Every subject's versions (``latestOnly``: the latest of each), as ``GET .../versions/{v}``."""
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
        state = self._registry.state
        out = []
        for subject in self._registry.subjects(deleted, request.query.get("subjectPrefix", "")):
            versions = state.versions(subject, deleted)
            out += [_version_body(v) for v in (versions[-1:] if latest_only else versions)]
        return out

    async def schema_types(self, request: web.Request) -> Any:
        return list(SCHEMA_TYPES)

    async def get_schema(self, request: web.Request) -> Any:
        stored = self._registry.schema(_schema_id(request))
        body: JsonObject = {"schema": self._registry.formatted(stored, request.query.get("format"))}
        if stored.schema_type != "AVRO":
            body["schemaType"] = stored.schema_type
        if stored.references:
            body["references"] = [r.to_json() for r in stored.references]
        return body

    async def get_schema_text(self, request: web.Request) -> Any:
        stored = self._registry.schema(_schema_id(request))
        return web.Response(text=stored.schema, content_type=JSON_CONTENT_TYPE)

    async def get_schema_versions(self, request: web.Request) -> Any:
        return self._registry.schema_versions(_schema_id(request), _flag(request, "deleted"))

    async def get_schema_subjects(self, request: web.Request) -> Any:
        return self._registry.schema_subjects(_schema_id(request), _flag(request, "deleted"))

    async def _check(self, request: web.Request, version: str | None) -> Any:
        schema_request = _schema_request(await _json_body(request), _flag(request, "normalize"))
        subject = request.match_info["subject"]
        if version is None:
            messages = self._registry.test_compatibility(subject, None, schema_request, all_versions=True)
        else:
            messages = self._registry.test_compatibility(subject, parse_version(version), schema_request)
        body: JsonObject = {"is_compatible": not messages}
        if _flag(request, "verbose"):
            body["messages"] = messages
        return body

    async def check_version(self, request: web.Request) -> Any:
        return await self._check(request, request.match_info["version"])

    async def check_all(self, request: web.Request) -> Any:
        return await self._check(request, None)

    async def get_config(self, request: web.Request) -> Any:
        subject = request.match_info.get("subject")
        level = self._registry.compatibility(subject, _flag(request, "defaultToGlobal"))
        return {"compatibilityLevel": level}

    async def get_mode(self, request: web.Request) -> Any:
        subject = request.match_info.get("subject")
        return {"mode": self._registry.mode(subject, _flag(request, "defaultToGlobal"))}

    # --- writes ----------------------------------------------------------------------------------
    async def register(self, request: web.Request) -> Any:
        schema_request = _schema_request(await _json_body(request), _flag(request, "normalize"))
        subject = request.match_info["subject"]
        return await self.service.write(lambda reg: reg.register(subject, schema_request))

    async def delete_version(self, request: web.Request) -> Any:
        subject, permanent = request.match_info["subject"], _flag(request, "permanent")
        version = parse_version(request.match_info["version"])
        return await self.service.write(lambda reg: reg.delete_version(subject, version, permanent))

    async def delete_subject(self, request: web.Request) -> Any:
        subject, permanent = request.match_info["subject"], _flag(request, "permanent")
        return await self.service.write(lambda reg: reg.delete_subject(subject, permanent))

    async def put_config(self, request: web.Request) -> Any:
        body = await _json_body(request)
        level = body.get("compatibility") if isinstance(body, dict) else None
        subject = request.match_info.get("subject")
        return await self.service.write(lambda reg: reg.set_compatibility(subject, level))

    async def delete_config(self, request: web.Request) -> Any:
        subject = request.match_info.get("subject")
        return await self.service.write(lambda reg: reg.delete_compatibility(subject))

    async def put_mode(self, request: web.Request) -> Any:
        body = await _json_body(request)
        mode = body.get("mode") if isinstance(body, dict) else None
        subject, force = request.match_info.get("subject"), _flag(request, "force")
        return await self.service.write(lambda reg: reg.set_mode(subject, mode, force))

    async def delete_mode(self, request: web.Request) -> Any:
        subject = request.match_info["subject"]
        return await self.service.write(lambda reg: reg.delete_mode(subject))
