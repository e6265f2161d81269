"""ACLs end to end with real clients: the admin APIs (confluent-kafka, kafka-python) and enforcement.

Until SASL gives clients names, every PLAINTEXT client is ``User:ANONYMOUS``: the tests make it a super
user to write ACLs, then restart the broker without ``super.users`` (which also shows that ACLs survive a
restart) and check what the same principal may and may not do under ``allow.everyone.if.no.acl.found=false``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from strom.protocol.api import SUPPORTED, ApiKey
from strom.testing.broker_process import BrokerProcess

from .acl_clients import (
    EVERYTHING,
    acl_filter,
    binding,
    consume_code,
    grant,
    kafka_python_filter,
    produce_code,
)
from .rawclient import RawClient

ACLS_ON = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
}
ANON = "User:ANONYMOUS"


_binding = partial(binding, ANON)  # (rtype, name, op, *, deny=False, pattern=LITERAL)


@pytest.fixture
def admin_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "b", {**ACLS_ON, "super.users": ANON}) as broker:
        yield broker


def test_acl_admin_apis_confluent_kafka(admin_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": admin_broker.bootstrap})
    grant(
        admin,
        _binding(ResourceType.TOPIC, "orders", AclOperation.READ),
        _binding(ResourceType.TOPIC, "app.", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        _binding(ResourceType.GROUP, "*", AclOperation.READ),
        _binding(ResourceType.TOPIC, "secret", AclOperation.ALL, deny=True),
    )
    no_type = AclBinding(
        ResourceType.TOPIC,
        "x",
        ResourcePatternType.LITERAL,
        "alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    bad = admin.create_acls([no_type], request_timeout=15)
    with pytest.raises(KafkaException):
        next(iter(bad.values())).result()

    def describe(flt: AclBindingFilter) -> set[tuple[str, str, int]]:
        found = admin.describe_acls(flt, request_timeout=15).result()
        return {(b.name, b.resource_pattern_type.name, b.operation.value) for b in found}

    assert len(describe(EVERYTHING)) == 4
    match = acl_filter(ResourceType.TOPIC, "app.orders", ResourcePatternType.MATCH)
    assert describe(match) == {("app.", "PREFIXED", AclOperation.WRITE.value)}
    exact = acl_filter(ResourceType.TOPIC, "app.", ResourcePatternType.ANY)
    assert describe(exact) == {("app.", "PREFIXED", AclOperation.WRITE.value)}

    deny_filter = acl_filter(ResourceType.TOPIC, permission=AclPermissionType.DENY)
    deleted = admin.delete_acls([deny_filter], request_timeout=15)
    assert [b.name for b in next(iter(deleted.values())).result()] == ["secret"]
    assert len(describe(EVERYTHING)) == 3


def test_acl_admin_apis_kafka_python(admin_broker: BrokerProcess) -> None:
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
    )
    from kafka.admin import ResourceType as KpResourceType

    admin = KafkaAdminClient(bootstrap_servers=admin_broker.bootstrap)
    try:
        acl = ACL(
            ANON,
            "*",
            ACLOperation.READ,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED),
        )
        result = admin.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = kafka_python_filter(KpResourceType.TOPIC)
        found, error = admin.describe_acls(flt)
        assert error.errno == 0 and [(a.resource_pattern.resource_name, a.operation) for a in found] == [
            ("kp-", ACLOperation.READ)
        ]
        deleted = admin.delete_acls([flt])
        assert len(deleted[0][1]) == 1
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()


def test_acl_apis_without_authorizer_answer_security_disabled(tmp_path: Path) -> None:
    # kafka-python surfaces the error code (librdkafka 2.16 answers an empty list instead).
    from kafka.admin import KafkaAdminClient
    from kafka.errors import SecurityDisabledError

    with BrokerProcess(tmp_path / "b", {}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            with pytest.raises(SecurityDisabledError):
                admin.describe_acls(kafka_python_filter())
        finally:
            admin.close()


def test_enforcement_after_restart_without_super_user(tmp_path: Path) -> None:
    base = tmp_path / "b"
    with BrokerProcess(base, {**ACLS_ON, "super.users": ANON}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics(
            [NewTopic(t, 1, 1) for t in ("open", "closed", "app.x", "app.secret")]
        ).values():
            f.result(15)
        prefixed = ResourcePatternType.PREFIXED
        grant(
            admin,
            _binding(ResourceType.TOPIC, "open", AclOperation.WRITE),
            _binding(ResourceType.TOPIC, "open", AclOperation.READ),
            _binding(ResourceType.TOPIC, "app.", AclOperation.WRITE, pattern=prefixed),
            _binding(ResourceType.TOPIC, "app.secret", AclOperation.WRITE, deny=True),
            _binding(ResourceType.GROUP, "g-ok", AclOperation.READ),
            _binding(ResourceType.TRANSACTIONAL_ID, "tx-", AclOperation.WRITE, pattern=prefixed),
            _binding(ResourceType.TRANSACTIONAL_ID, "tx-", AclOperation.DESCRIBE, pattern=prefixed),
        )
    with BrokerProcess(base, ACLS_ON) as broker:
        anonymous = {"bootstrap.servers": broker.bootstrap}
        assert produce_code(anonymous, "open") == 0
        assert produce_code(anonymous, "app.x") == 0
        for denied in ("closed", "app.secret"):
            assert produce_code(anonymous, denied) == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_topics(timeout=15).topics
        assert {"open", "app.x", "app.secret"} <= set(listed) and "closed" not in listed
        created = admin.create_topics([NewTopic("new-one", 1, 1)])["new-one"]
        with pytest.raises(KafkaException) as info:
            created.result(15)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        deleted = admin.delete_topics(["open"])["open"]
        with pytest.raises(KafkaException) as info:
            deleted.result(15)
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        assert consume_code(anonymous, "g-ok", "open") == 0
        assert consume_code(anonymous, "g-denied", "open") == KafkaError.GROUP_AUTHORIZATION_FAILED
        assert consume_code(anonymous, "g-ok", "closed") == KafkaError.TOPIC_AUTHORIZATION_FAILED

        # Idempotence needs IDEMPOTENT_WRITE or WRITE on some topic (KIP-679): WRITE on "open" suffices.
        idem = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        idem.produce("open", b"idempotent")
        assert idem.flush(15) == 0
        txn_ok = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1"})
        txn_ok.init_transactions(15)
        txn_ok.begin_transaction()
        txn_ok.produce("open", b"in a transaction")
        txn_ok.commit_transaction(15)
        txn_denied = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "other-tx"})
        with pytest.raises(KafkaException) as info:
            txn_denied.init_transactions(15)
        assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_acl_apis_at_every_advertised_version(admin_broker: BrokerProcess) -> None:
    """ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS and ApiKey.DELETE_ACLS at each version in SUPPORTED."""
    low, high = SUPPORTED[ApiKey.CREATE_ACLS]
    assert SUPPORTED[ApiKey.DESCRIBE_ACLS] == SUPPORTED[ApiKey.DELETE_ACLS] == (low, high)
    raw = RawClient(admin_broker.bootstrap)
    try:
        for version in range(low, high + 1):
            name = f"raw-v{version}"
            creation = {
                "resource_type": 2,
                "resource_name": name,
                "resource_pattern_type": 3,
                "principal": "User:bob",
                "host": "*",
                "operation": 3,
                "permission_type": 3,
            }
            created = raw.call(ApiKey.CREATE_ACLS, version, {"creations": [creation]})
            assert [r["error_code"] for r in created["results"]] == [0], version
            flt = {
                "resource_type_filter": 2,
                "resource_name_filter": name,
                "pattern_type_filter": 3,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            }
            described = raw.call(ApiKey.DESCRIBE_ACLS, version, flt)
            assert described["error_code"] == 0
            assert [
                (r["resource_name"], [a["principal"] for a in r["acls"]]) for r in described["resources"]
            ] == [(name, ["User:bob"])]
            deleted = raw.call(ApiKey.DELETE_ACLS, version, {"filters": [flt]})
            matching = deleted["filter_results"][0]["matching_acls"]
            assert [(m["resource_name"], m["operation"]) for m in matching] == [(name, 3)]
            assert raw.call(ApiKey.DESCRIBE_ACLS, version, flt)["resources"] == []
    finally:
        raw.sock.close()


def test_fetch_of_many_topics_with_one_refused(tmp_path: Path) -> None:
    # 40,000 readable topics and one refused: the refused one answers TOPIC_AUTHORIZATION_FAILED and the
    # split is linear (a list-membership test made it ~10^9 dict comparisons on the event loop).
    with BrokerProcess(tmp_path / "b", {**ACLS_ON, "allow.everyone.if.no.acl.found": "true"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        grant(admin, _binding(ResourceType.TOPIC, "x", AclOperation.READ, deny=True))
        names = [f"t{i}" for i in range(40_000)] + ["x"]
        partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [{"topic": n, "partitions": [partition]} for n in names],
        }
        with RawClient(broker.bootstrap, timeout_s=10) as raw:  # ~1 s; it was ~20 s
            answer = raw.call(ApiKey.FETCH, 4, body)
        codes = {t["topic"]: t["partitions"][0]["error_code"] for t in answer["responses"]}
        assert len(codes) == len(names)
        assert codes["x"] == 29  # TOPIC_AUTHORIZATION_FAILED
        assert codes["t5"] == 3  # UNKNOWN_TOPIC_OR_PARTITION: read allowed, no such topic
