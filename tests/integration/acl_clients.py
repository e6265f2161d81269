"""What the ACL suites (tests/integration/test_acls*.py, tests/cluster/test_acls_cluster.py) do with real
clients: build bindings and filters, grant them through an admin client, and see the error code a
produce or a group consume ends with (0 when it succeeds), for whichever principal ``conf`` logs in as."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType


def binding(
    principal: str,
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    *,
    deny: bool = False,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    """An ACL for ``principal`` from any host."""
    perm = AclPermissionType.DENY if deny else AclPermissionType.ALLOW
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def acl_filter(
    rtype: ResourceType = ResourceType.ANY,
    name: str | None = None,
    pattern: ResourcePatternType = ResourcePatternType.ANY,
    *,
    principal: str | None = None,
    permission: AclPermissionType = AclPermissionType.ANY,
) -> AclBindingFilter:
    """A filter for confluent-kafka's describe_acls / delete_acls; None matches anything."""
    return AclBindingFilter(rtype, name, pattern, principal, None, AclOperation.ANY, permission)


EVERYTHING = acl_filter()


def kafka_python_filter(rtype: KpResourceType = KpResourceType.ANY) -> ACLFilter:
    """kafka-python's filter for every ACL on resources of ``rtype``."""
    resources = ResourcePatternFilter(rtype, None, ACLResourcePatternType.ANY)
    return ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, resources)


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings), request_timeout=15).values():
        future.result()


def produce_code(conf: dict[str, Any], topic: str, *, idempotent: bool = False) -> int:
    """0 when one record is delivered to ``topic``, else the delivery error's code."""
    codes: list[int] = []
    producer = Producer({**conf, "message.timeout.ms": 8000, "enable.idempotence": idempotent})
    producer.produce(topic, b"v", on_delivery=lambda err, _m: codes.append(0 if err is None else err.code()))
    producer.flush(15)
    return codes[0]


def consume_code(conf: dict[str, Any], group: str, topic: str) -> int:
    """0 when a record of ``topic`` arrives for a member of ``group``, else the first error code."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        for _ in range(20):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is None:
                return 0
            if msg.error().code() != KafkaError._PARTITION_EOF:
                return int(msg.error().code())
        raise AssertionError("neither a record nor an error")
    finally:
        consumer.close()
