"""Kafka's ACL decision (strom.acl.authorizer) and the ZooKeeper layouts (strom.acl.zk_format)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.acl.authorizer import AclSet, authorize, authorize_any, parse_super_users
from strom.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    invalid_binding,
)
from strom.acl.zk_format import decode_change, decode_entries, encode_change, encode_entries, pattern_path

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(
    name: str,
    op: Op,
    perm: AclPermissionType = ALLOW,
    principal: str = "User:alice",
    *,
    kind: ResourceType = T,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern), AccessControlEntry(principal, host, op, perm))


def ok(
    acls: AclSet,
    op: Op,
    name: str,
    principal: str = "User:alice",
    host: str = "10.0.0.1",
    kind: ResourceType = T,
    **kw: object,
) -> bool:
    return authorize(acls, principal, host, op, kind, name, **kw)  # type: ignore[arg-type]


def test_no_acl_falls_back_to_allow_everyone_setting() -> None:
    empty = AclSet()
    assert not ok(empty, Op.READ, "t")
    assert ok(empty, Op.READ, "t", allow_if_no_acl=True)
    # An ACL for anybody on the resource turns the fallback off for everybody else.
    other = AclSet([acl("t", Op.READ, principal="User:bob")])
    assert not ok(other, Op.READ, "t", allow_if_no_acl=True)
    assert ok(other, Op.READ, "u", allow_if_no_acl=True)


def test_super_users_always_allowed() -> None:
    su = parse_super_users("User:admin; User:broker;")
    assert su == {"User:admin", "User:broker"}
    acls = AclSet([acl("t", Op.ALL, DENY, "User:*")])
    assert ok(acls, Op.WRITE, "t", principal="User:admin", super_users=su)
    assert not ok(acls, Op.WRITE, "t", super_users=su)


def test_implications_are_for_allow_only() -> None:
    acls = AclSet([acl("t", Op.WRITE), acl("c", Op.ALTER_CONFIGS)])
    assert ok(acls, Op.WRITE, "t") and ok(acls, Op.DESCRIBE, "t")
    assert not ok(acls, Op.READ, "t") and not ok(acls, Op.DESCRIBE_CONFIGS, "t")
    assert ok(acls, Op.DESCRIBE_CONFIGS, "c") and not ok(acls, Op.DESCRIBE, "c")
    denied_write = AclSet([acl("t", Op.DESCRIBE), acl("t", Op.WRITE, DENY)])
    assert ok(denied_write, Op.DESCRIBE, "t")  # a DENY on WRITE does not deny DESCRIBE
    all_allowed = AclSet([acl("t", Op.ALL)])
    assert all(ok(all_allowed, op, "t") for op in (Op.READ, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS))


def test_deny_beats_allow_across_patterns_principals_and_hosts() -> None:
    acls = AclSet(
        [
            acl("*", Op.READ, principal="User:*"),
            acl("secret-", Op.READ, DENY, pattern=PRE),
            acl("t", Op.ALL, DENY, "User:*", host="10.0.0.9"),
        ]
    )
    assert ok(acls, Op.READ, "orders")
    assert not ok(acls, Op.READ, "secret-x")
    assert ok(acls, Op.READ, "secret-x", principal="User:bob")
    assert not ok(acls, Op.READ, "t", host="10.0.0.9") and ok(acls, Op.READ, "t", host="10.0.0.1")


def test_hosts_match_as_addresses() -> None:
    acls = AclSet([acl("t", Op.READ, host="0:0:0:0:0:0:0:1")])  # Kafka's (Java's) IPv6 spelling
    assert ok(acls, Op.READ, "t", host="::1")
    assert not ok(acls, Op.READ, "t", host="127.0.0.1") and not ok(acls, Op.READ, "t", host="not-an-ip")


def test_prefixed_and_wildcard_matching() -> None:
    acls = AclSet([acl("app.", Op.WRITE, pattern=PRE), acl("*", Op.READ, pattern=PRE)])
    assert ok(acls, Op.WRITE, "app.orders") and not ok(acls, Op.WRITE, "ap")
    assert not ok(acls, Op.READ, "orders")  # a PREFIXED "*" is an ordinary prefix
    assert ok(acls, Op.READ, "*x")
    assert not ok(acls, Op.WRITE, "app.orders", kind=G)  # types do not mix


def test_authorize_any_kip_679() -> None:
    assert not authorize_any(AclSet(), "User:alice", "h", Op.WRITE, T)
    assert authorize_any(AclSet(), "User:alice", "h", Op.WRITE, T, allow_if_no_acl=True)
    acls = AclSet([acl("t", Op.WRITE)])
    assert authorize_any(acls, "User:alice", "h", Op.WRITE, T)
    assert not authorize_any(acls, "User:bob", "h", Op.WRITE, T)
    denied = AclSet([acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)])
    assert not authorize_any(denied, "User:alice", "h", Op.WRITE, T)
    prefix = AclSet([acl("a.b", Op.WRITE, pattern=PRE), acl("a.", Op.ALL, DENY, pattern=PRE)])
    assert not authorize_any(prefix, "User:alice", "h", Op.WRITE, T)


def test_invalid_bindings_are_refused() -> None:
    assert invalid_binding(acl("t", Op.READ)) is None
    assert invalid_binding(acl("t", Op.ANY)) is not None
    assert invalid_binding(acl("t", Op.READ, pattern=PatternType.MATCH)) is not None
    assert invalid_binding(acl("t", Op.READ, AclPermissionType.ANY)) is not None
    assert invalid_binding(acl("t", Op.READ, kind=ResourceType.ANY)) is not None
    assert invalid_binding(acl("a/b", Op.READ)) is not None
    assert invalid_binding(acl("x", Op.ALTER, kind=ResourceType.CLUSTER)) is not None
    assert invalid_binding(acl("kafka-cluster", Op.ALTER, kind=ResourceType.CLUSTER)) is None
    assert invalid_binding(acl("t", Op.READ, principal="alice")) is not None


def test_filters_any_versus_match() -> None:
    lit = acl("orders", Op.READ)
    star = acl("*", Op.READ)
    pre = acl("ord", Op.READ, pattern=PRE)
    other = acl("payments", Op.READ)
    every = [lit, star, pre, other]
    match = AclBindingFilter(T, "orders", PatternType.MATCH)
    assert [b for b in every if match.matches(b)] == [lit, star, pre]
    any_ = AclBindingFilter(T, "orders", PatternType.ANY)
    assert [b for b in every if any_.matches(b)] == [lit]
    assert all(AclBindingFilter().matches(b) for b in every)
    assert not AclBindingFilter(principal="User:bob").matches(lit)
    assert AclBindingFilter(operation=Op.READ, permission=ALLOW, host="*").matches(lit)
    assert AclBindingFilter(ResourceType.UNKNOWN).invalid() is not None


def test_zk_layouts() -> None:
    pattern = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PRE)
    assert pattern_path(pattern) == "/kafka-acl-extended/prefixed/TransactionalId/tx"
    assert pattern_path(ResourcePattern(T, "t", LIT)) == "/kafka-acl/Topic/t"
    entries = {AccessControlEntry("User:alice", "*", Op.IDEMPOTENT_WRITE, ALLOW)}
    raw = encode_entries(entries)
    assert b'"operation":"IdempotentWrite"' in raw and b'"permissionType":"Allow"' in raw
    assert decode_entries(raw) == entries
    assert encode_change(ResourcePattern(T, "orders", LIT)) == b"Topic:orders"
    for p in (pattern, ResourcePattern(T, "a:b", LIT)):
        assert decode_change(p.pattern_type, encode_change(p)) == p


_names = st.sampled_from(["a", "ab", "abc", "b", "*"])
_bindings = st.builds(
    lambda name, op, perm, principal, pattern: acl(name, op, perm, principal, pattern=pattern),
    _names,
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL]),
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from([LIT, PRE]),
)


def _reference(bindings: list[AclBinding], op: Op, name: str) -> bool:
    """A direct reading of Kafka's rules over the whole list (no index)."""

    def covers(p: ResourcePattern) -> bool:
        if p.pattern_type == LIT:
            return p.name in (name, "*")
        return name.startswith(p.name)

    cands = [b.entry for b in bindings if covers(b.pattern)]
    if not cands:
        return False
    mine = [e for e in cands if e.principal in ("User:alice", "User:*")]
    if any(e.permission == DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}}.get(op, set())
    return any(
        e.permission == ALLOW and (e.operation in (op, Op.ALL) or e.operation in implied) for e in mine
    )


@given(st.lists(_bindings, max_size=8), st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE]), _names)
def test_decision_agrees_with_a_direct_reading(bindings: list[AclBinding], op: Op, name: str) -> None:
    acls = AclSet(bindings)
    assert ok(acls, op, name) == _reference(bindings, op, name)
    # Removing every pattern one at a time through set_entries keeps the index consistent.
    for pattern in acls.patterns():
        acls.set_entries(pattern, ())
    assert not ok(acls, op, name)
