"""Pure parts of strom.web.authz: which ACL check each registry route needs, the filtered lists, and
Confluent's 403 body; Strom's Subject resource type in the ACL model and its decision."""

from __future__ import annotations

from strom.acl.authorizer import AclSet, authorize
from strom.acl.model import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    from_pascal,
    pascal,
)
from strom.web.authz import Need, filter_subjects, registry_need

SUBJECT = {"subject": "orders-value", "version": "1"}


def test_registry_routes_map_to_subject_and_cluster_checks() -> None:
    cases = {
        ("GET", "/subjects/{subject}/versions/{version}"): AclOperation.READ,
        ("POST", "/subjects/{subject}"): AclOperation.READ,
        ("POST", "/compatibility/subjects/{subject}/versions"): AclOperation.READ,
        ("POST", "/subjects/{subject}/versions"): AclOperation.WRITE,
        ("DELETE", "/subjects/{subject}"): AclOperation.DELETE,
        ("PUT", "/config/{subject}"): AclOperation.ALTER_CONFIGS,
        ("GET", "/mode/{subject}"): AclOperation.DESCRIBE_CONFIGS,
    }
    for (method, route), operation in cases.items():
        assert registry_need(method, route, SUBJECT) == Need(operation, ResourceType.SUBJECT, "orders-value")
    assert registry_need("PUT", "/config", {}) == Need(
        AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME
    )
    for route in ("/subjects", "/schemas", "/schemas/types", "/", "/schemas/ids/{id}"):
        assert registry_need("GET", route, {"id": "1"}) is None, route


def test_lists_keep_only_visible_subjects() -> None:
    def visible(name: str) -> bool:
        return name.startswith("orders")

    assert filter_subjects("/subjects", ["orders-value", "secret-value"], visible) == ["orders-value"]
    versions = [{"subject": "secret-value", "version": 1}, {"subject": "orders-key", "version": 2}]
    assert filter_subjects("/schemas/ids/{id}/versions", versions, visible) == versions[1:]
    assert filter_subjects("/subjects/{subject}/versions", [1, 2], visible) == [1, 2]  # not a subject list


def test_denial_names_the_operation_and_subject_as_confluent_does() -> None:
    body = Need(AclOperation.WRITE, ResourceType.SUBJECT, "orders-value").denial()
    assert body == {"error_code": 40301, "message": "User is denied operation Write on Subject: orders-value"}


def test_subject_is_a_resource_type_with_kafkas_rules() -> None:
    assert pascal(ResourceType.SUBJECT.name) == "Subject"
    assert from_pascal(ResourceType, "Subject") is ResourceType.SUBJECT
    prefixed = ResourcePattern(ResourceType.SUBJECT, "orders-", PatternType.PREFIXED)
    grant = AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    acls = AclSet([AclBinding(prefixed, grant)])

    def may(operation: AclOperation, name: str, resource_type: ResourceType = ResourceType.SUBJECT) -> bool:
        return authorize(
            acls,
            "User:alice",
            "10.0.0.1",
            operation,
            resource_type,
            name,
            super_users=frozenset(),
            allow_if_no_acl=False,
        )

    assert may(AclOperation.WRITE, "orders-value") and may(AclOperation.DESCRIBE, "orders-value")
    assert not may(AclOperation.DELETE, "orders-value")
    assert not may(AclOperation.WRITE, "payments-value")
    assert not may(AclOperation.WRITE, "orders-value", ResourceType.TOPIC)  # a topic of the same name
