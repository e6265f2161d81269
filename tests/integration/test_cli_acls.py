"""``strom acls list | add | remove`` against a broker with ACLs on (kafka-acls.sh vocabulary)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strom.acl.model import AclOperation, PatternType, ResourceType
from strom.console.acls import AclArgs, plan_bindings, plan_filters
from strom.console.errors import ConsoleError
from strom.testing.broker_process import BrokerProcess

STROM = [sys.executable, "-m", "strom.cli.main"]


def test_plans_follow_kafka_acls_vocabulary() -> None:
    specs = plan_bindings(
        AclArgs(
            topics=["t"],
            cluster=True,
            allow_principals=["User:alice"],
            operations=["Read", "idempotent-write"],
        )
    )
    assert {(s.resource_type, s.name, s.operation) for s in specs} == {
        (ResourceType.TOPIC, "t", AclOperation.READ),
        (ResourceType.TOPIC, "t", AclOperation.IDEMPOTENT_WRITE),
        (ResourceType.CLUSTER, "kafka-cluster", AclOperation.READ),
        (ResourceType.CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
    }
    assert all(s.host == "*" and s.allow and s.pattern_type == PatternType.LITERAL for s in specs)
    with pytest.raises(ConsoleError):
        plan_bindings(AclArgs(topics=["t"], allow_principals=["User:a"], operations=["Any"]))
    with pytest.raises(ConsoleError):
        plan_bindings(
            AclArgs(topics=["t"], allow_principals=["User:a"], operations=["Read"], pattern_type="match")
        )
    (everything,) = plan_filters(AclArgs(pattern_type="any"), need_resource=False)
    assert everything.resource_type == ResourceType.ANY and everything.principal is None
    with pytest.raises(ConsoleError):
        plan_filters(AclArgs(), need_resource=True)


def test_cli_add_list_remove(tmp_path: Path) -> None:
    overrides = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with BrokerProcess(tmp_path / "b", overrides) as broker:

        def strom(*args: str) -> str:
            done = subprocess.run(
                [*STROM, "--bootstrap-server", broker.bootstrap, *args],
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode()
            return done.stdout.decode()

        added = strom(
            "acls",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            "orders-",
            "--resource-pattern-type",
            "prefixed",
        )
        assert "Added 2 ACL(s)" in added
        strom("acls", "add", "--deny-principal", "User:bob", "--operation", "All", "--group", "g1")
        listed = strom("acls", "list")
        assert (
            "Current ACLs for resource "
            "`ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)`:\n"
            " \t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
            " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        ) in listed
        assert "(principal=User:bob, host=*, operation=ALL, permissionType=DENY)" in listed
        matching = strom("acls", "list", "--topic", "orders-eu", "--resource-pattern-type", "match")
        assert "orders-" in matching and "g1" not in matching
        assert "User:bob" not in strom("acls", "list", "--principal", "User:alice")
        removed = strom(
            "acls",
            "remove",
            "--topic",
            "orders-",
            "--resource-pattern-type",
            "prefixed",
            "--operation",
            "Read",
        )
        assert "Removed 1 ACL(s)" in removed
        left = strom("acls", "list")
        assert "operation=READ" not in left and "operation=DESCRIBE" in left
        # --cluster: librdkafka calls Kafka's CLUSTER resource type BROKER; the CLI speaks Kafka's names.
        cluster = strom("acls", "add", "--cluster", "--allow-principal", "User:alice", "--operation", "Alter")
        assert "`ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`" in cluster
        assert "operation=ALTER" in strom("acls", "list", "--cluster")
        assert "Removed 1 ACL(s)" in strom("acls", "remove", "--cluster")
        assert "kafka-cluster" not in strom("acls", "list")
