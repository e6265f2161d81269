"""Cluster admin: `strom cluster up/down`, CreatePartitions, reassignment, ElectLeaders CLI."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.codec import decode_response, encode_request
from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.integration.rawclient import RawClient
from tests.prerequisites import require_zookeeper

from .conftest import partitions_of, wait_until

pytestmark = pytest.mark.cluster


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "strom.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _call(address: str, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_request(api_key, version, 1, "test", body))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        payload = b""
        while len(payload) < size:
            payload += s.recv(size - len(payload))
    return decode_response(api_key, version, payload)[1]


def test_cluster_up_partitions_reassignment_elect_down(tmp_path: Path) -> None:
    require_zookeeper()
    base = tmp_path / "dev"
    up = _cli(
        "cluster",
        "up",
        "--brokers",
        "3",
        "--dir",
        str(base),
        "--set",
        "offsets.topic.num.partitions=3",
        "--set",
        "zookeeper.session.timeout.ms=3000",
    )
    assert up.returncode == 0, up.stderr
    state = json.loads((base / "cluster.json").read_text())
    bootstrap = state["bootstrap"]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.create_topics([NewTopic("moves", 2, 2)]).values():
            fut.result(timeout=30)
        wait_until(lambda: all(p[0] >= 0 for p in partitions_of(bootstrap, "moves").values()))
        for fut in admin.create_partitions([NewPartitions("moves", 4)]).values():
            fut.result(timeout=30)
        parts = wait_until(
            lambda: len(partitions_of(bootstrap, "moves")) == 4 and partitions_of(bootstrap, "moves")
        )
        assert all(len(p[1]) == 2 for p in parts.values())
        md = admin.list_topics(timeout=10)
        controller = md.brokers[md.controller_id]
        address = f"{controller.host}:{controller.port}"
        old = parts[0][1]
        target = [b for b in (0, 1, 2) if b not in old] + [old[0]]
        body = {
            "timeout_ms": 30000,
            "topics": [{"name": "moves", "partitions": [{"partition_index": 0, "replicas": target}]}],
        }
        response = _call(address, 45, 0, body)
        assert response["responses"][0]["partitions"][0]["error_code"] == 0
        wait_until(
            lambda: sorted(partitions_of(bootstrap, "moves")[0][1]) == sorted(target), 30, "reassignment"
        )
        wait_until(lambda: not _call(address, 46, 0, {"timeout_ms": 1000, "topics": None})["topics"], 30)
        out = _cli("cluster", "elect-leaders", "--bootstrap-server", bootstrap, "--topic", "moves")
        assert out.returncode == 0, out.stdout + out.stderr
        wait_until(lambda: all(p[0] == p[1][0] for p in partitions_of(bootstrap, "moves").values()), 30)
        described = _cli("cluster", "describe", "--bootstrap-server", bootstrap, "--topic", "moves")
        assert described.returncode == 0 and "Leaders" in described.stdout
    finally:
        down = _cli("cluster", "down", "--dir", str(base))
    assert down.returncode == 0, down.stderr
    assert not (base / "cluster.json").exists()


def test_auto_created_topic_is_leader_not_available_until_the_controller_answers(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """Kafka's answer while an auto-created topic is on its way from ZooKeeper to the brokers' caches is
    LEADER_NOT_AVAILABLE (clients retry), never UNKNOWN_TOPIC_OR_PARTITION (clients give up: `strom
    produce` to a new topic on a cluster failed with "does not exist")."""
    cluster = make_cluster(brokers=1)
    body = {"topics": [{"name": "fresh"}], "allow_auto_topic_creation": True}
    with RawClient(cluster.bootstrap) as raw:
        # Two requests back to back: the second finds the topic in ZooKeeper, not yet in the cache.
        first, second = raw.send(ApiKey.METADATA, 8, body), raw.send(ApiKey.METADATA, 8, body)
        answers = [raw.recv(ApiKey.METADATA, 8, cid)["topics"][0]["error_code"] for cid in (first, second)]
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION not in answers, answers
    produced = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom.cli.main",
            "produce",
            "fresh2",
            "--bootstrap-server",
            cluster.bootstrap,
        ],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = _cli(
        "consume",
        "fresh2",
        "--from-beginning",
        "--max-messages",
        "1",
        "--bootstrap-server",
        cluster.bootstrap,
    )
    assert consumed.stdout == "hello\n", consumed.stderr
