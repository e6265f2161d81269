"""``strom acls ... --subject NAME``: ACLs on schema registry subjects, Strom's own resource type.

A subject is a resource of type ``Subject`` (code 100 in Strom's ACL model, `ResourceType.SUBJECT`),
checked by the broker's HTTP side on every registry call (docs/security.md). Kafka's clients know only
Kafka's resource types and refuse others, so these bindings travel in kafka-python's CreateAcls,
DescribeAcls and DeleteAcls messages built here with the type's code, over the connection
`strom.console.kafka_admin` opens (the same security settings as every other ``strom acls`` call).
The specs are `strom.console.acls`'s; the printed layout is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka.protocol.admin.acl import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

from strom.acl.model import AclOperation, AclPermissionType, PatternType, ResourceType
from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_admin import admin_call, kafka_admin

# One printed binding: (resource type, name, pattern type, principal, host, operation, permission).
Row = tuple[str, str, str, str, str, str, str]


def _permission(allow: bool | None) -> int:
    return {None: AclPermissionType.ANY, True: AclPermissionType.ALLOW, False: AclPermissionType.DENY}[allow]


def _send(options: ClientOptions, what: str, request: Any) -> Any:
    with kafka_admin(options, "acls") as admin:
        manager = admin._manager  # kafka-python's own request path (routing, retries, security)
        return admin_call(options, what, lambda: manager.run(manager.send, request))


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        raise ConsoleError(f"{what}: {message or f'error code {code}'}")


def _row(resource_type: int, name: str, pattern: int, acl: Any) -> Row:
    return (
        ResourceType(resource_type).name,
        name,
        PatternType(pattern).name,
        str(acl.principal),
        str(acl.host),
        AclOperation(acl.operation).name,
        AclPermissionType(acl.permission_type).name,
    )


def create(options: ClientOptions, specs: Sequence[Any]) -> list[Row]:
    creations = [
        CreateAclsRequest.AclCreation(
            resource_type=int(s.resource_type),
            resource_name=str(s.name),
            resource_pattern_type=int(s.pattern_type),
            principal=str(s.principal),
            host=s.host or "*",
            operation=int(s.operation),
            permission_type=_permission(bool(s.allow)),
        )
        for s in specs
    ]
    response = _send(options, "cannot add subject ACLs", CreateAclsRequest(creations=creations))
    for result in response.results:
        _check(result.error_code, result.error_message, "cannot add a subject ACL")
    return [_row(c.resource_type, c.resource_name, c.resource_pattern_type, c) for c in creations]


def describe(options: ClientOptions, spec: Any) -> list[Row]:
    request = DescribeAclsRequest(
        resource_type_filter=int(ResourceType.SUBJECT),
        resource_name_filter=spec.name,
        pattern_type_filter=int(spec.pattern_type),
        principal_filter=spec.principal,
        host_filter=spec.host,
        operation=int(spec.operation),
        permission_type=_permission(spec.allow),
    )
    response = _send(options, "cannot list subject ACLs", request)
    _check(response.error_code, response.error_message, "cannot list subject ACLs")
    return [
        _row(r.resource_type, r.resource_name, r.pattern_type, acl)
        for r in response.resources
        for acl in r.acls
    ]


def delete(options: ClientOptions, specs: Sequence[Any]) -> list[Row]:
    filters = [
        DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=int(ResourceType.SUBJECT),
            resource_name_filter=s.name,
            pattern_type_filter=int(s.pattern_type),
            principal_filter=s.principal,
            host_filter=s.host,
            operation=int(s.operation),
            permission_type=_permission(s.allow),
        )
        for s in specs
    ]
    response = _send(options, "cannot remove subject ACLs", DeleteAclsRequest(filters=filters))
    rows: list[Row] = []
    for result in response.filter_results:
        _check(result.error_code, result.error_message, "cannot remove subject ACLs")
        rows += [_row(a.resource_type, a.resource_name, a.pattern_type, a) for a in result.matching_acls]
    return rows
