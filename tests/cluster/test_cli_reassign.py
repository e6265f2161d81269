"""`strom topics reassign` on a 3-broker ZooKeeper cluster with Kafka's JSON plan: refusals; --execute --wait
drawing its progress on a terminal and moving the data; --verify in a pipe (no progress); a move held back
(its new replica's broker paused, then killed) listed as in progress, then undone with --cancel."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from strom.testing.cluster import LocalCluster
from tests.integration.test_cli_progress import run_on_terminal

from .conftest import partitions_of, wait_until
from .test_cluster import create_topic

pytestmark = pytest.mark.cluster

STROM = [sys.executable, "-m", "strom.cli.main"]


def _plan(path: Path, topic: str, targets: dict[int, list[int]]) -> Path:
    partitions = [{"topic": topic, "partition": p, "replicas": r} for p, r in sorted(targets.items())]
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return path


def _reassign(bootstrap: str, plan: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    args = [*STROM, "topics", "reassign", "--bootstrap-server", bootstrap, "--reassignment-json-file"]
    return subprocess.run([*args, str(plan), *mode], capture_output=True, text=True, timeout=90, check=False)


def test_reassign_execute_wait_verify_cancel(make_cluster: Any, tmp_path: Path) -> None:
    # A ZooKeeper session far longer than the pause below: the paused broker must stay registered.
    # 60 s: while it is paused, a request kafka-python happens to send it waits until it times out;
    # in CI (2026-11-24) the --execute below outlasted a 20 s session, and the controller rightly
    # refused the move as naming a broker no longer alive.
    cluster: LocalCluster = make_cluster(3, zookeeper_session_timeout_ms="60000")
    topic = "moving"
    create_topic(cluster.bootstrap, topic, 2, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(200):
        producer.produce(topic, str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    producer.close()
    before = {p: replicas for p, (_, replicas, _) in partitions_of(cluster.bootstrap, topic).items()}
    # Each partition moves to the two brokers it is not on, the new preferred leader first.
    targets = {p: [b for b in (0, 1, 2) if b not in replicas] for p, replicas in before.items()}
    plan = _plan(tmp_path / "plan.json", topic, targets)

    # Refusals: an unknown partition stops the command before anything is sent; a broker that does not
    # exist is refused by the controller for that partition alone.
    unknown = _reassign(
        cluster.bootstrap, _plan(tmp_path / "u.json", topic, {0: targets[0], 3: [0]}), "--execute"
    )
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == f"strom: error: unknown partition(s): {topic}-3\n"
    refused = _reassign(
        cluster.bootstrap, _plan(tmp_path / "r.json", topic, {1: [*before[1], 7]}), "--execute"
    )
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"cannot reassign {topic}-1: Replication assignment is invalid. (INVALID_REPLICA_ASSIGNMENT)",
        "strom: error: 1 of 1 partition reassignments were not started",
    ]
    assert partitions_of(cluster.bootstrap, topic)[1][1] == before[1]

    execute = [*STROM, "topics", "reassign", "--bootstrap-server", cluster.bootstrap]
    code, out, drawn = run_on_terminal(
        [*execute, "--reassignment-json-file", str(plan), "--execute", "--wait", "--wait-timeout-s", "60"]
    )
    lines = out.decode().splitlines()
    assert code == 0, drawn
    rollback = json.loads(lines[1])  # the current assignment, in the plan's format
    assert rollback == {
        "version": 1,
        "partitions": [
            {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
            for p, r in sorted(before.items())
        ],
    }
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in lines
    assert {f"Reassignment of partition {topic}-{p} is completed." for p in (0, 1)} <= set(lines)
    assert "Reassigning partitions" in drawn and "2/2" in drawn
    moved = partitions_of(cluster.bootstrap, topic)
    assert {p: (leader, replicas, sorted(isr)) for p, (leader, replicas, isr) in moved.items()} == {
        p: (t[0], t, sorted(t)) for p, t in targets.items()
    }
    # The records moved with the partitions.
    consumed = subprocess.run(
        [
            *STROM,
            "consume",
            topic,
            "--bootstrap-server",
            cluster.bootstrap,
            "--from-beginning",
            "--max-messages",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    assert sorted(map(int, consumed.stdout.split())) == list(range(200))

    verified = _reassign(cluster.bootstrap, plan, "--verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines() == [
        f"Reassignment of partition {topic}-{p} is completed." for p in (0, 1)
    ]
    assert verified.stderr == ""  # piped: no progress, no escape codes

    # Hold a move back: a partition gains a replica on a broker (not the controller, which must answer)
    # that is paused while the move starts, then killed: its ZooKeeper session (60 s) keeps it
    # registered, so the move stays in progress; and it refuses connections, which the tool must
    # get around when kafka-python picks that broker for a request.
    controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).controller_id
    p, lost = next((p, r[0]) for p, r in sorted(before.items()) if r[0] != controller)
    grow = _plan(tmp_path / "grow.json", topic, {p: [*targets[p], lost]})
    via_controller = cluster.brokers[controller].bootstrap
    # Killed before the move starts (paused instead, it made kafka-python's requests wait out their
    # timeout whenever one went to that broker: three times in one CI run). Its session still holds.
    cluster.brokers[lost].signal(signal.SIGKILL)
    started = _reassign(via_controller, grow, "--execute")
    assert started.returncode == 0, started.stderr
    for _ in range(3):  # kafka-python picks a broker at random for Metadata: try it a few times
        pending = _reassign(via_controller, grow, "--verify")
        assert pending.stdout == f"Reassignment of partition {topic}-{p} is still in progress.\n", (
            pending.stderr
        )
        assert pending.returncode == 1
        assert pending.stderr == "strom: error: 1 of 1 partition reassignments are not complete\n"
    cancelled = _reassign(via_controller, grow, "--cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"Successfully cancelled partition reassignments for: {topic}-{p}\n"
    again = _reassign(via_controller, grow, "--cancel")
    assert (again.returncode, again.stdout) == (
        0,
        "None of the specified partition reassignments are active.\n",
    )
    wait_until(lambda: partitions_of(via_controller, topic)[p][1] == targets[p], 30, "the move undone")
    differs = _reassign(via_controller, grow, "--verify")
    assert differs.returncode == 1
    assert differs.stdout == (
        f"There is no active reassignment of partition {topic}-{p}, but its replicas are {targets[p]} "
        f"rather than {[*targets[p], lost]}.\n"
    )
