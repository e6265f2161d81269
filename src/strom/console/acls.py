"""``strom acls``: list, add and remove ACLs in the vocabulary of Kafka's ``kafka-acls.sh``.

Resources are named with ``--topic``, ``--group``, ``--transactional-id``, ``--subject`` (a schema
registry subject, Strom's own resource type: `strom.console.subject_acls`) (each repeatable) and
``--cluster``; ``--resource-pattern-type`` is literal (default), prefixed, or for list/remove also any
or match (Kafka's filter semantics: any = that exact name under every pattern type, match = every ACL
that applies to the name). Principals come from ``--allow-principal`` / ``--deny-principal`` with hosts
from ``--allow-host`` / ``--deny-host`` (default ``*``), operations from ``--operation`` (Read, Write,
Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All).

`plan_bindings` and `plan_filters` are the pure part: arguments to the bindings to create or filters to
apply; the rest calls the broker's CreateAcls / DescribeAcls / DeleteAcls through confluent-kafka's
AdminClient and prints Kafka's layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO, cast

from strom.acl.model import CLUSTER_NAME, AclOperation, PatternType, ResourceType, from_pascal, pascal
from strom.console import _admin_api as api
from strom.console import subject_acls
from strom.console.clients import ClientOptions, wait
from strom.console.errors import ConsoleError
from strom.console.topics import admin_client


@dataclass
class AclArgs:
    topics: Sequence[str] = ()
    groups: Sequence[str] = ()
    transactional_ids: Sequence[str] = ()
    subjects: Sequence[str] = ()
    cluster: bool = False
    pattern_type: str = "literal"
    allow_principals: Sequence[str] = ()
    deny_principals: Sequence[str] = ()
    allow_hosts: Sequence[str] = ()
    deny_hosts: Sequence[str] = ()
    operations: Sequence[str] = field(default_factory=list)
    principal: str | None = None  # list: only this principal's ACLs


@dataclass(frozen=True)
class Spec:
    """One binding or filter in Strom's enums (None = any, for filters)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    allow: bool | None


def _resources(args: AclArgs, *, need_one: bool) -> list[tuple[ResourceType, str | None]]:
    found: list[tuple[ResourceType, str | None]] = [(ResourceType.TOPIC, t) for t in args.topics]
    found += [(ResourceType.GROUP, g) for g in args.groups]
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_ids]
    found += [(ResourceType.SUBJECT, s) for s in args.subjects]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not found and need_one:
        raise ConsoleError("name a resource: --topic, --group, --transactional-id, --subject or --cluster")
    return found


def _operation(text: str) -> AclOperation:
    try:
        op = from_pascal(AclOperation, text)
    except ValueError:
        raise ConsoleError(f"unknown operation {text!r}") from None
    if op in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ConsoleError(f"operation {text!r} cannot be granted or denied")
    return op


def _pattern(text: str, *, filter_ok: bool) -> PatternType:
    try:
        kind = from_pascal(PatternType, text)
    except ValueError:
        raise ConsoleError(f"unknown resource pattern type {text!r}") from None
    allowed = (PatternType.LITERAL, PatternType.PREFIXED) + (
        (PatternType.ANY, PatternType.MATCH) if filter_ok else ()
    )
    if kind not in allowed:
        raise ConsoleError(f"resource pattern type {text!r} is not allowed here")
    return kind


def _entries(args: AclArgs) -> list[tuple[str, str, bool]]:
    """(principal, host, allow) for every principal x host given."""
    rows = [(p, h, True) for p in args.allow_principals for h in (args.allow_hosts or ["*"])]
    rows += [(p, h, False) for p in args.deny_principals for h in (args.deny_hosts or ["*"])]
    return rows


def plan_bindings(args: AclArgs) -> list[Spec]:
    """``acls add``: every resource x principal/host x operation."""
    kind = _pattern(args.pattern_type, filter_ok=False)
    entries = _entries(args)
    if not entries:
        raise ConsoleError("give --allow-principal or --deny-principal")
    if not args.operations:
        raise ConsoleError("give at least one --operation")
    ops = [_operation(o) for o in args.operations]
    return [
        Spec(rtype, name, kind, principal, host, op, allow)
        for rtype, name in _resources(args, need_one=True)
        for principal, host, allow in entries
        for op in ops
    ]


def plan_filters(args: AclArgs, *, need_resource: bool) -> list[Spec]:
    """``acls list`` / ``acls remove``: filters; principals, hosts and operations narrow them."""
    kind = _pattern(args.pattern_type, filter_ok=True)
    resources = _resources(args, need_one=need_resource) or [(ResourceType.ANY, None)]
    entries: list[tuple[str | None, str | None, bool | None]] = list(_entries(args))
    if args.principal is not None:
        entries.append((args.principal, None, None))
    if not entries:
        entries = [(None, None, None)]
    ops = [_operation(o) for o in args.operations] or [AclOperation.ANY]
    return [
        Spec(rtype, name, kind, principal, host if args.allow_hosts or args.deny_hosts else None, op, allow)
        for rtype, name in resources
        for principal, host, allow in entries
        for op in ops
    ]


def _admin_resource_type(resource_type: ResourceType) -> api.ResourceType:
    """librdkafka names Kafka's CLUSTER resource type (code 4) BROKER; the codes are Kafka's."""
    return api.ResourceType(int(resource_type))


def _binding(spec: Spec) -> api.AclBinding:
    return api.AclBinding(
        _admin_resource_type(spec.resource_type),
        str(spec.name),
        api.ResourcePatternType[spec.pattern_type.name],
        str(spec.principal),
        spec.host or "*",
        api.AclOperation[spec.operation.name],
        api.AclPermissionType.ALLOW if spec.allow else api.AclPermissionType.DENY,
    )


def _filter(spec: Spec) -> api.AclBindingFilter:
    permission = {None: "ANY", True: "ALLOW", False: "DENY"}[spec.allow]
    # None means "any" for librdkafka's filters, although the stubs say str.
    return api.AclBindingFilter(
        _admin_resource_type(spec.resource_type),
        cast(str, spec.name),
        api.ResourcePatternType[spec.pattern_type.name],
        cast(str, spec.principal),
        cast(str, spec.host),
        api.AclOperation[spec.operation.name],
        api.AclPermissionType[permission],
    )


def _name(value: object) -> str:
    """An enum member's name (confluent-kafka types its fields as enum | str | int)."""
    return str(getattr(value, "name", value))


def _resource_type_name(value: object) -> str:
    """Kafka's name of a resource type: CLUSTER where librdkafka says BROKER."""
    name = _name(value)
    return ResourceType.CLUSTER.name if name == "BROKER" else name


def _rows(bindings: Sequence[api.AclBinding]) -> list[subject_acls.Row]:
    return [
        (
            _resource_type_name(b.restype),
            str(b.name),
            _name(b.resource_pattern_type),
            str(b.principal),
            str(b.host),
            _name(b.operation),
            _name(b.permission_type),
        )
        for b in bindings
    ]


def _print(rows: Sequence[subject_acls.Row], out: TextIO) -> None:
    """Kafka's layout: one block per resource pattern, one line per entry."""
    grouped: dict[tuple[str, str, str], list[tuple[str, str, str, str]]] = {}
    for rtype, name, kind, principal, host, op, permission in rows:
        grouped.setdefault((pascal(rtype) if rtype == "SUBJECT" else rtype, name, kind), []).append(
            (principal, host, op, permission)
        )
    for (rtype, name, kind), entries in sorted(grouped.items()):
        pattern = f"ResourcePattern(resourceType={rtype}, name={name}, patternType={kind})"
        out.write(f"Current ACLs for resource `{pattern}`:\n")
        for principal, host, op, permission in sorted(set(entries)):
            out.write(
                f" \t(principal={principal}, host={host}, operation={op}, permissionType={permission})\n"
            )
        out.write("\n")


def _kafka_specs(specs: list[Spec]) -> tuple[list[Spec], list[Spec]]:
    """(Kafka's resource types, subjects): the second go through `subject_acls`."""
    subject = [s for s in specs if s.resource_type == ResourceType.SUBJECT]
    return [s for s in specs if s.resource_type != ResourceType.SUBJECT], subject


def add_acls(options: ClientOptions, args: AclArgs, out: TextIO) -> None:
    kafka, subjects = _kafka_specs(plan_bindings(args))
    rows = subject_acls.create(options, subjects) if subjects else []
    bindings = [_binding(s) for s in kafka]
    if bindings:
        admin = admin_client(options)
        futures = admin.create_acls(bindings, request_timeout=options.timeout_s)
        for binding, future in futures.items():
            wait(future, f"cannot add ACL {binding}", options)
    out.write(f"Added {len(bindings) + len(rows)} ACL(s):\n")
    _print(_rows(bindings) + rows, out)


def list_acls(options: ClientOptions, args: AclArgs, out: TextIO) -> None:
    specs = plan_filters(args, need_resource=False)
    rows: list[subject_acls.Row] = []
    kafka = [s for s in specs if s.resource_type != ResourceType.SUBJECT]
    if kafka:
        admin = admin_client(options)
        for spec in kafka:
            future = admin.describe_acls(_filter(spec), request_timeout=options.timeout_s)
            # Subject ACLs reach librdkafka as an unknown type: they are listed through subject_acls.
            rows += [r for r in _rows(wait(future, "cannot list ACLs", options)) if r[0] != "UNKNOWN"]
    for spec in specs:
        if spec.resource_type in (ResourceType.SUBJECT, ResourceType.ANY):
            rows += subject_acls.describe(options, spec)
    _print(rows, out)


def remove_acls(options: ClientOptions, args: AclArgs, out: TextIO) -> None:
    kafka, subjects = _kafka_specs(plan_filters(args, need_resource=True))
    rows = subject_acls.delete(options, subjects) if subjects else []
    filters = [_filter(s) for s in kafka]
    if filters:
        admin = admin_client(options)
        futures = admin.delete_acls(filters, request_timeout=options.timeout_s)
        removed: list[api.AclBinding] = []
        for future in futures.values():
            removed += wait(future, "cannot remove ACLs", options)
        rows = _rows(removed) + rows
    out.write(f"Removed {len(rows)} ACL(s).\n")
    _print(rows, out)
