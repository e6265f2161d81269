"""The broker's Authorizer over the ACL znodes of a persisted local metadata store: create, filters,
delete, persistence across a reopen, and the start-up check of authorizer.class.name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.metadata_clients import local_client

from strom.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.broker.authorization import Authorizer, check_authorizer_class
from strom.cluster.acl_znodes import AclZnodeStore
from strom.cluster.local_store import LocalStore


def _binding(name: str, op: AclOperation, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, pattern),
        AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW),
    )


def _reopen(tmp_path: Path, stores: list[LocalStore]) -> AclZnodeStore:
    """The ACL store of a store reopened from its directory (the previous one closed first)."""
    for store in stores:
        store.close()
    client, store = local_client(tmp_path)
    stores.append(store)
    return AclZnodeStore(client)


def test_create_describe_delete_and_reopen(tmp_path: Path) -> None:
    stores: list[LocalStore] = []
    auth = Authorizer(_reopen(tmp_path, stores), "User:admin", allow_if_no_acl=False)
    bad = AclBinding(
        ResourcePattern(ResourceType.TOPIC, "t", PatternType.MATCH),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    reasons = asyncio.run(
        auth.create(
            [
                _binding("t", AclOperation.READ),
                _binding("app.", AclOperation.WRITE, PatternType.PREFIXED),
                bad,
            ]
        )
    )
    assert reasons[:2] == [None, None] and reasons[2] is not None
    assert auth.allowed("User:alice", "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "app.x")
    assert auth.allowed("User:admin", "10.0.0.1", AclOperation.DELETE, ResourceType.TOPIC, "t")
    assert not auth.allowed("User:bob", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "t")
    assert auth.allowed_any("User:alice", "h", AclOperation.WRITE, ResourceType.TOPIC)

    reopened = Authorizer(_reopen(tmp_path, stores), None, allow_if_no_acl=False)
    assert {
        (b.pattern.name, b.pattern.pattern_type, b.entry.operation)
        for b in reopened.describe(AclBindingFilter())
    } == {
        ("t", PatternType.LITERAL, AclOperation.READ),
        ("app.", PatternType.PREFIXED, AclOperation.WRITE),
    }
    assert len(reopened.describe(AclBindingFilter())) == 2
    assert reopened.allowed("User:alice", "h", AclOperation.DESCRIBE, ResourceType.TOPIC, "t")

    removed = asyncio.run(
        reopened.delete(AclBindingFilter(ResourceType.TOPIC, "app.orders", PatternType.MATCH))
    )
    assert [b.pattern.name for b in removed] == ["app."]
    assert not reopened.allowed("User:alice", "h", AclOperation.WRITE, ResourceType.TOPIC, "app.x")
    assert len(Authorizer(_reopen(tmp_path, stores), None, False).describe(AclBindingFilter())) == 1
    stores[-1].close()


def test_authorizer_class_names() -> None:
    assert (
        check_authorizer_class(" kafka.security.authorizer.AclAuthorizer ")
        == "kafka.security.authorizer.AclAuthorizer"
    )
    assert check_authorizer_class("") == ""
    with pytest.raises(ValueError, match="unsupported authorizer"):
        check_authorizer_class("com.example.MyAuthorizer")
