"""confluent-kafka consumers with ``group.protocol=consumer`` (KIP-848) as child processes.

Each consumer is a process printing one JSON line per event: its partitions after each incremental
rebalance callback (KIP-848 consumers are told only what is added or revoked), every message it
consumed, then its synchronous commit (one per message), and when it closed. A test can SIGKILL
one (no leave heartbeat: the coordinator must notice the missing heartbeats) or SIGTERM it (commit,
close, leave with epoch -1). Processes are stopped by PID; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONSUMER = r"""
import json, signal, sys, time
cfg = json.loads(sys.argv[1])
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def emit(**kw):
    print(json.dumps(kw), flush=True)
from confluent_kafka import Consumer
conf = {
    "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"], "group.protocol": "consumer",
    "auto.offset.reset": "earliest", "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}
conf.update(cfg.get("extra", {}))
c = Consumer(conf)
current = set()
def on_assign(cons, parts):
    global current
    ps = {p.partition for p in parts}
    current |= ps
    emit(ev="assign", added=sorted(ps), partitions=sorted(current))
def on_revoke(cons, parts):
    global current
    ps = {p.partition for p in parts}
    current -= ps
    emit(ev="revoke", removed=sorted(ps), partitions=sorted(current))
c.subscribe(cfg["topics"], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
emit(ev="started")
while not stop:
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    emit(ev="msg", t=m.topic(), p=m.partition(), o=m.offset())
    try:
        c.commit(message=m, asynchronous=False)
        emit(ev="committed", p=m.partition(), o=m.offset())
    except Exception as exc:  # a revoked partition's commit may be refused: reported, not fatal
        emit(ev="commit_failed", p=m.partition(), o=m.offset(), error=str(exc))
    if cfg.get("delay_s"):
        time.sleep(cfg["delay_s"])
c.close()
emit(ev="closed")
"""


class Consumer:
    """One consumer process and the events it reported."""

    def __init__(self, log_dir: Path, name: str, cfg: dict[str, Any]) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stderr = open(log_dir / f"{name}.stderr", "w")  # noqa: SIM115  (closed in reap)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONSUMER, json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    @property
    def partitions(self) -> set[int]:
        """The partitions after the last rebalance callback (empty before the first)."""
        changes = [e for e in self.snapshot() if e["ev"] in ("assign", "revoke")]
        return set(changes[-1]["partitions"]) if changes else set()

    def revoked(self) -> set[int]:
        return {p for e in self.snapshot() if e["ev"] == "revoke" for p in e["removed"]}

    def messages(self) -> list[tuple[int, int]]:
        return [(e["p"], e["o"]) for e in self.snapshot() if e["ev"] == "msg"]

    def committed(self) -> list[tuple[int, int]]:
        return [(e["p"], e["o"]) for e in self.snapshot() if e["ev"] == "committed"]

    def lost_partitions(self) -> bool:
        """Whether its partitions ever went to none after it first had some (an eager rebalance)."""
        seen = False
        for event in self.snapshot():
            if event["ev"] in ("assign", "revoke"):
                if seen and not event["partitions"]:
                    return True
                seen = seen or bool(event["partitions"])
        return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.reap()

    def terminate(self, timeout_s: float = 30) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.reap(timeout_s)

    def reap(self, timeout_s: float = 30) -> None:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)
        if not self._stderr.closed:
            self._stderr.close()


def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return condition()


def join_body(group: str, member_id: str, topics: list[str]) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat v1 body with which a new member joins the group subscribed to topics."""
    return {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": None,
    }


def classic_join_body(group: str, metadata: bytes = b"") -> dict[str, Any]:
    """A JoinGroup body (v5 and later) with which a new classic consumer joins with the range assignor."""
    return {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}],
        "reason": None,
    }
