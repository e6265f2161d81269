"""A single node's first log dir as Strom wrote it before the local metadata store: the topic catalogue
and its journal, the producer-id file, meta.properties, acls.json and scram-credentials.json, written
byte for byte as those versions wrote them (the files are described in
strom.broker.control.catalogue_import)."""

from __future__ import annotations

import json
from pathlib import Path

from strom.broker.security.scram import make_credential

CLUSTER_ID = "FormerClusterId0000000"
TOPIC_ID = bytes(range(16))


def write_former_catalogue(log_dir: Path, node_id: int) -> str:
    """Write the files; returns alice's SCRAM-SHA-256 credential as stored."""
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={node_id}\n")
    topic = {"topic_id": TOPIC_ID.hex(), "partitions": 3, "replication_factor": 1, "leader_epoch": 0}
    catalogue = {"topics": {"orders": {**topic, "configs": {"retention.ms": "1000"}}}}
    (log_dir / "strom-topics.json").write_text(json.dumps(catalogue, indent=1))
    changes = [
        {"put": "gone", "topic": {**topic, "topic_id": "ff" * 16, "partitions": 1, "configs": {}}},
        {"delete": "gone"},
        {
            "put": "orders",
            "topic": {**topic, "partitions": 4, "configs": {"retention.ms": "2000"}, "leader_epoch": 5},
        },
    ]
    journal = b"".join(json.dumps(c, separators=(",", ":")).encode() + b"\n" for c in changes)
    (log_dir / "strom-topics.journal").write_bytes(journal + b'{"put":"torn","top')  # a torn last append
    (log_dir / "strom-producer-id").write_text("2000")
    acl = {
        "resourceType": "Topic",
        "name": "orders",
        "patternType": "Literal",
        "principal": "User:alice",
        "host": "*",
        "operation": "Read",
        "permissionType": "Allow",
    }
    (log_dir / "acls.json").write_text(json.dumps([acl], indent=1))
    credential = make_credential("SCRAM-SHA-256", "alice-secret", 4096).to_kafka()
    users = {"version": 1, "users": {"alice": {"SCRAM-SHA-256": credential}}}
    (log_dir / "scram-credentials.json").write_text(json.dumps(users))
    return credential
