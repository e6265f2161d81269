"""ACL vocabulary with Kafka's wire codes: resource, pattern, operation and permission types; bindings.

A binding is a resource pattern (type, name, LITERAL or PREFIXED) plus an access control entry
(principal ``Type:name`` or ``User:*``, host IP or ``*``, operation, ALLOW or DENY). Filters are what
DescribeAcls and DeleteAcls carry: every field may be "any" (None / ANY), and the pattern type MATCH
selects every binding that would apply to the named resource (the literal name, the literal ``*`` and
the prefixes of the name), whereas ANY selects the name exactly under any pattern type.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource
WILDCARD = "*"  # a LITERAL name matching every resource of its type; also a host and User:*


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7
    # Strom's own: a schema registry subject (the HTTP side's registry API). Kafka's codes stop at 7;
    # this one is far above them, so a code Kafka adds later cannot collide with it.
    SUBJECT = 100


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's implications, for ALLOW only: being allowed one of these also allows DESCRIBE (resp.
# DESCRIBE_CONFIGS). A DENY applies to its own operation (and ALL) only.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

_E = TypeVar("_E", bound=IntEnum)

CONCRETE_TYPES = frozenset(t for t in ResourceType if t > ResourceType.ANY)
CONCRETE_OPERATIONS = frozenset(o for o in AclOperation if o > AclOperation.ANY)


def pascal(name: str) -> str:
    """Kafka's spelling in ZooKeeper and tools: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


def from_pascal(enum: type[_E], text: str) -> _E:
    """The member spelled `text` in PascalCase, upper snake case or any case; ValueError otherwise."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for member in enum:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise ValueError(f"unknown {enum.__name__}: {text!r}")


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def invalid_binding(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses this binding (Kafka's checks), or None when it may be stored."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type not in CONCRETE_TYPES:
        return f"invalid resource type {pattern.resource_type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {pattern.pattern_type.name}"
    if entry.operation not in CONCRETE_OPERATIONS:
        return f"invalid operation {entry.operation.name}"
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"invalid permission type {entry.permission.name}"
    if not pattern.name:
        return "resource name must not be empty"
    if "/" in pattern.name and pattern.resource_type != ResourceType.CLUSTER:
        return "resource name must not contain '/'"  # it becomes a znode name
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME}"
    if ":" not in entry.principal or entry.principal.startswith(":"):
        return f"invalid principal {entry.principal!r} (expected Type:name)"
    if not entry.host:
        return "host must not be empty"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls/DeleteAcls filter; None fields and the ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def invalid(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "the filter has an UNKNOWN resource or pattern type"
        if self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN:
            return "the filter has an UNKNOWN operation or permission type"
        return None

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if not self._matches_name(pattern):
            return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation not in (AclOperation.ANY, entry.operation):
            return False
        return self.permission in (AclPermissionType.ANY, entry.permission)

    def _matches_name(self, pattern: ResourcePattern) -> bool:
        kind, name = self.pattern_type, self.name
        if kind == PatternType.MATCH:
            if name is None:
                return True
            if pattern.pattern_type == PatternType.LITERAL:
                return pattern.name in (name, WILDCARD)
            return pattern.pattern_type == PatternType.PREFIXED and name.startswith(pattern.name)
        if kind not in (PatternType.ANY, pattern.pattern_type):
            return False
        return name is None or name == pattern.name
