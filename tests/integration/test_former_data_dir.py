"""A broker started on a single node's data dir written by the former format (topic catalogue, producer
ids, cluster id, acls.json, SCRAM credentials; tests/former_catalogue.py) serves all of it, imported into
its metadata store, to a real client."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from strom.testing.broker_process import BrokerProcess
from tests.former_catalogue import CLUSTER_ID, write_former_catalogue


def test_a_former_single_node_data_dir_opens(tmp_path: Path) -> None:
    write_former_catalogue(tmp_path / "broker" / "logs", 0)
    settings = {
        "broker.id": "0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with BrokerProcess(tmp_path / "broker", settings) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        metadata = admin.list_topics(timeout=10)
        assert metadata.cluster_id == CLUSTER_ID
        assert "gone" not in metadata.topics
        partitions = metadata.topics["orders"].partitions
        assert sorted(partitions) == [0, 1, 2, 3] and {p.leader for p in partitions.values()} == {0}
        (configs,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "orders")]).values()
        assert configs.result(timeout=10)["retention.ms"].value == "2000"
        acls = admin.describe_acls(
            AclBindingFilter(
                ResourceType.ANY,
                None,
                ResourcePatternType.ANY,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ).result(timeout=10)
        assert [(a.name, a.principal, a.operation) for a in acls] == [
            ("orders", "User:alice", AclOperation.READ)
        ]
        described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=10)
        assert [info.iterations for info in described.scram_credential_infos] == [4096]
