"""The authorization decision, Kafka's AclAuthorizer rules over an in-memory set of bindings.

For a principal at a host asking an operation on a resource (type, name):

1. a super user is allowed everything;
2. the candidate bindings are those of the resource type on the LITERAL name, the LITERAL ``*``, and
   every PREFIXED pattern the name starts with (a PREFIXED ``*`` is an ordinary prefix and matches only
   names starting with ``*``);
3. with no candidate binding at all (for anybody), the answer is ``allow.everyone.if.no.acl.found``;
4. a candidate DENY for the principal (or ``User:*``) and host (or ``*``) on the operation or ALL denies;
5. otherwise a matching ALLOW on the operation, on ALL, or on an operation implying it (READ, WRITE,
   DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows; else denied.

`AclSet` indexes bindings by resource type and pattern so a decision looks at a handful of dict
entries and the prefixes of the name, not at every binding.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from functools import lru_cache

from strom.acl.model import (
    IMPLIED_BY,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

_Entries = frozenset[AccessControlEntry]


def parse_super_users(raw: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    return frozenset(part.strip() for part in (raw or "").split(";") if part.strip())


class AclSet:
    """Every stored binding, indexed by pattern; replaced per pattern as the store reports changes."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._by_pattern: dict[ResourcePattern, _Entries] = {}
        grouped: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            grouped.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in grouped.items():
            self._by_pattern[pattern] = frozenset(entries)
        self._prefixed: dict[ResourceType, dict[str, _Entries]] = {}
        self._reindex()

    def _reindex(self) -> None:
        prefixed: dict[ResourceType, dict[str, _Entries]] = {}
        for pattern, entries in self._by_pattern.items():
            if pattern.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(pattern.resource_type, {})[pattern.name] = entries
        self._prefixed = prefixed

    def set_entries(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the entries of one pattern (an empty set removes it)."""
        frozen = frozenset(entries)
        if frozen:
            self._by_pattern[pattern] = frozen
        else:
            self._by_pattern.pop(pattern, None)
        if pattern.pattern_type == PatternType.PREFIXED:
            self._reindex()

    def entries(self, pattern: ResourcePattern) -> _Entries:
        return self._by_pattern.get(pattern, frozenset())

    def bindings(self) -> Iterator[AclBinding]:
        for pattern, entries in self._by_pattern.items():
            for entry in entries:
                yield AclBinding(pattern, entry)

    def patterns(self) -> list[ResourcePattern]:
        return list(self._by_pattern)

    def candidates(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries that apply to one resource: its literal name, the literal ``*``, its prefixes."""
        found: list[AccessControlEntry] = []
        get = self._by_pattern.get
        found += get(ResourcePattern(resource_type, name, PatternType.LITERAL), ())
        if name != WILDCARD:
            found += get(ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL), ())
        for prefix, entries in self._prefixed.get(resource_type, {}).items():
            if name.startswith(prefix):
                found += entries
        return found

    def has_type(self, resource_type: ResourceType) -> bool:
        return any(p.resource_type == resource_type for p in self._by_pattern)


def _applies(entry: AccessControlEntry, principal: str, host: str) -> bool:
    if entry.principal not in (principal, "User:*"):
        return False
    return entry.host in (host, WILDCARD) or _same_ip(entry.host, host)


@lru_cache(maxsize=1024)
def _same_ip(acl_host: str, client_host: str) -> bool:
    """Spellings of one address: Kafka writes IPv6 as ``0:0:0:0:0:0:0:1`` where Python says ``::1``."""
    try:
        return ipaddress.ip_address(acl_host) == ipaddress.ip_address(client_host)
    except ValueError:
        return False


def authorize(
    acls: AclSet,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    """Whether `principal` connecting from `host` may perform `operation` on the resource (see above)."""
    if principal in super_users:
        return True
    candidates = acls.candidates(resource_type, name)
    if not candidates:
        return allow_if_no_acl
    return _decide(candidates, principal, host, operation)


def _decide(candidates: list[AccessControlEntry], principal: str, host: str, operation: AclOperation) -> bool:
    implied_by = IMPLIED_BY.get(operation, frozenset())
    allowed = False
    for entry in candidates:
        if not _applies(entry, principal, host):
            continue
        if entry.permission == AclPermissionType.DENY:
            if entry.operation in (operation, AclOperation.ALL):
                return False
        elif entry.operation in (operation, AclOperation.ALL) or entry.operation in implied_by:
            allowed = True
    return allowed


def authorize_any(
    acls: AclSet,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    """Whether the principal may perform `operation` on at least one resource of the type (KIP-679).

    Kafka's ``authorizeByResourceType``: some ALLOW pattern (literal or prefixed) for the principal
    whose resources are not all denied: a literal name not denied on itself, on ``*`` or by a prefix of
    it; a prefix not denied by ``*`` or by a shorter-or-equal denied prefix. With no binding of the type
    at all, ``allow.everyone.if.no.acl.found`` decides.
    """
    if principal in super_users:
        return True
    if not acls.has_type(resource_type):
        return allow_if_no_acl
    for pattern in acls.patterns():
        if pattern.resource_type != resource_type:
            continue
        if not any(
            _applies(e, principal, host)
            and e.permission == AclPermissionType.ALLOW
            and e.operation in (operation, AclOperation.ALL)
            for e in acls.entries(pattern)
        ):
            continue
        if pattern.pattern_type == PatternType.LITERAL and pattern.name != WILDCARD:
            if _decide(acls.candidates(resource_type, pattern.name), principal, host, operation):
                return True
        elif not _denied_everywhere_below(acls, pattern, principal, host, operation):
            return True
    return False


def _denied_everywhere_below(
    acls: AclSet, pattern: ResourcePattern, principal: str, host: str, operation: AclOperation
) -> bool:
    """Whether a DENY covers every name the wildcard or prefix `pattern` covers."""
    deny_ops = (operation, AclOperation.ALL)
    for entry in acls.entries(ResourcePattern(pattern.resource_type, WILDCARD, PatternType.LITERAL)):
        if (
            _applies(entry, principal, host)
            and entry.permission == AclPermissionType.DENY
            and entry.operation in deny_ops
        ):
            return True
    if pattern.pattern_type != PatternType.PREFIXED:
        return False
    for other in acls.patterns():
        if (
            other.resource_type == pattern.resource_type
            and other.pattern_type == PatternType.PREFIXED
            and pattern.name.startswith(other.name)
        ):
            for entry in acls.entries(other):
                if (
                    _applies(entry, principal, host)
                    and entry.permission == AclPermissionType.DENY
                    and entry.operation in deny_ops
                ):
                    return True
    return False
