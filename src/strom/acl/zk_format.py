"""Where Kafka keeps ACLs in ZooKeeper and the znode contents, so Kafka's tools and Strom agree.

Paths: LITERAL bindings under ``/kafka-acl/<ResourceType>/<name>``, PREFIXED ones under
``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (type in PascalCase: Topic, Group, Cluster,
TransactionalId, DelegationToken, User). One znode per pattern holds all its entries:

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}

A change to a pattern is announced by a sequential child ``acl_changes_<10 digits>`` of
``/kafka-acl-changes`` with data ``Topic:orders`` (LITERAL) or of ``/kafka-acl-extended-changes`` with
``{"version":1,"resourceType":"Topic","name":"orders","patternType":"Prefixed"}`` (PREFIXED); every
broker re-reads the named pattern's znode.
"""

from __future__ import annotations

import json
from typing import TypedDict

from strom.acl.model import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    from_pascal,
    pascal,
)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"


def type_root(pattern_type: PatternType, resource_type: ResourceType) -> str:
    root = LITERAL_ROOT if pattern_type == PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{pascal(resource_type.name)}"


def pattern_path(pattern: ResourcePattern) -> str:
    return f"{type_root(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


class AclEntryJson(TypedDict):
    """One entry of an ACL znode, as Kafka's ZooKeeper authorizer writes it."""

    principal: str
    permissionType: str
    operation: str
    host: str


class AclsZnode(TypedDict):
    """An ACL znode: every entry of one resource pattern."""

    version: int
    acls: list[AclEntryJson]


class PrefixedChangeZnode(TypedDict):
    """A change notification for a prefixed pattern (literal ones are a plain ``Type:name`` string)."""

    version: int
    resourceType: str
    name: str
    patternType: str


def encode_entries(entries: frozenset[AccessControlEntry] | set[AccessControlEntry]) -> bytes:
    acls: list[AclEntryJson] = [
        {
            "principal": e.principal,
            "permissionType": pascal(e.permission.name),
            "operation": pascal(e.operation.name),
            "host": e.host,
        }
        for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission))
    ]
    doc: AclsZnode = {"version": 1, "acls": acls}
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_entries(data: bytes | None) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    doc: AclsZnode = json.loads(data)
    return frozenset(
        AccessControlEntry(
            str(acl["principal"]),
            str(acl["host"]),
            from_pascal(AclOperation, str(acl["operation"])),
            from_pascal(AclPermissionType, str(acl["permissionType"])),
        )
        for acl in doc.get("acls", [])
    )


def change_root(pattern_type: PatternType) -> str:
    return LITERAL_CHANGES if pattern_type == PatternType.LITERAL else EXTENDED_CHANGES


def encode_change(pattern: ResourcePattern) -> bytes:
    kind = pascal(pattern.resource_type.name)
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{kind}:{pattern.name}".encode()
    doc: PrefixedChangeZnode = {
        "version": 1,
        "resourceType": kind,
        "name": pattern.name,
        "patternType": "Prefixed",
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_change(pattern_type: PatternType, data: bytes) -> ResourcePattern:
    if pattern_type == PatternType.LITERAL:
        kind, _, name = data.decode().partition(":")
        return ResourcePattern(from_pascal(ResourceType, kind), name, PatternType.LITERAL)
    doc: PrefixedChangeZnode = json.loads(data)
    return ResourcePattern(
        from_pascal(ResourceType, str(doc["resourceType"])),
        str(doc["name"]),
        from_pascal(PatternType, str(doc["patternType"])),
    )
