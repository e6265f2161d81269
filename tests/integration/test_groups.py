"""Consumer groups with real clients in separate processes (issue 3, "Verified by").

Each consumer is a child process (confluent-kafka or kafka-python) that prints one JSON line per event:
its assignment after every rebalance callback, every message it consumed, and when it closed. The test
reads those lines, so it can kill a consumer with SIGKILL (no LeaveGroup: the broker must notice the
missing heartbeats) or stop it cleanly with SIGTERM (commit, close, LeaveGroup). Processes are stopped by
PID and every wait is bounded.

The kafka-python worker learns its topic's partitions before its first poll (its first JoinGroup). With
``group.initial.rebalance.delay.ms=0`` a first join is answered before the consumer's first Metadata
answer, so the leader assigned nothing ("No partition metadata for topic") and rejoined once the
partitions came in, a rejoin asked for by its metadata snapshot alone. kafka-python 3.0.12 can wedge in
that rejoin: when a ``poll(timeout_ms=200)`` gives up between the leader's assignment (which makes
``need_rejoin()`` False) and its SyncGroup answer, no later poll awaits the join again, so the assignment
is never applied and heartbeats stay disabled for good; the broker expires the silent member after its
session timeout, as Kafka does, and the others rebalance without it (CI: a static member left out of
``test_static_member_restart_keeps_partitions_without_rebalance`` for 30 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess

SESSION_TIMEOUT_MS = 6000
STATIC_SESSION_MS = 20_000

WORKER = r"""
import json, signal, sys, time
cfg = json.loads(sys.argv[1])
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def emit(**kw):
    print(json.dumps(kw), flush=True)
current = set()
count = 0
max_messages = cfg.get("max_messages") or 0

if cfg["client"] == "confluent":
    from confluent_kafka import Consumer
    conf = {
        "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"], "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": cfg["session_ms"],
        "heartbeat.interval.ms": 500, "topic.metadata.refresh.interval.ms": 2000,
    }
    conf.update(cfg.get("extra", {}))
    c = Consumer(conf)
    coop = "cooperative" in conf.get("partition.assignment.strategy", "")
    def on_assign(cons, parts):
        global current
        ps = {p.partition for p in parts}
        current = current | ps if coop else ps
        emit(ev="assign", added=sorted(ps), partitions=sorted(current))
    def on_revoke(cons, parts):
        global current
        ps = {p.partition for p in parts}
        current = current - ps if coop else set()
        emit(ev="revoke", removed=sorted(ps), partitions=sorted(current))
    c.subscribe([cfg["topic"]], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    emit(ev="started")
    while not stop:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        emit(ev="msg", p=m.partition(), o=m.offset())
        count += 1
        if cfg.get("commit_each"):
            c.commit(message=m, asynchronous=False)
        if max_messages and count >= max_messages:
            break
    c.close()
else:
    from kafka import KafkaConsumer, ConsumerRebalanceListener
    from kafka.structs import OffsetAndMetadata
    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            global current
            current = set()
            emit(ev="revoke", removed=sorted(tp.partition for tp in revoked), partitions=[])
        def on_partitions_assigned(self, assigned):
            global current
            current = {tp.partition for tp in assigned}
            emit(ev="assign", added=sorted(current), partitions=sorted(current))
    c = KafkaConsumer(
        bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=cfg["session_ms"], heartbeat_interval_ms=500,
        metadata_max_age_ms=2000, **cfg.get("extra", {}),
    )
    c.subscribe([cfg["topic"]], listener=Listener())
    # Know the topic's partitions before the first join: see the test module's docstring.
    for _ in range(100):
        if cfg["topic"] in c.topics():
            break
        time.sleep(0.1)
    emit(ev="started")
    while not stop:
        batches = c.poll(timeout_ms=200, max_records=1)
        for tp, msgs in batches.items():
            for m in msgs:
                emit(ev="msg", p=m.partition, o=m.offset)
                count += 1
                if cfg.get("commit_each"):
                    c.commit({tp: OffsetAndMetadata(m.offset + 1, "", -1)})
        if max_messages and count >= max_messages:
            break
    c.close()
emit(ev="closed")
"""


class Worker:
    """One consumer process and the events it reported."""

    def __init__(self, log_dir: Path, name: str, cfg: dict[str, Any]) -> None:
        self.name = name
        self.log_dir = log_dir
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stderr = open(log_dir / f"{name}.stderr", "w")  # noqa: SIM115  (closed in reap)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(cfg)],
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
    def assignment(self) -> set[int] | None:
        """The partitions after the last rebalance callback; None until the first assignment.

        kafka-python calls `on_partitions_revoked(set())` before its first JoinGroup: that revoke is no
        assignment yet (read as one, a test raced the join's answer by some 30 ms).
        """
        events = self.snapshot()
        if not any(e["ev"] == "assign" for e in events):
            return None
        changes = [e for e in events if e["ev"] in ("assign", "revoke")]
        return set(changes[-1]["partitions"])

    def count(self, ev: str) -> int:
        return sum(1 for e in self.snapshot() if e["ev"] == ev)

    def messages(self) -> list[tuple[int, int]]:
        return [(e["p"], e["o"]) for e in self.snapshot() if e["ev"] == "msg"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.reap()

    def terminate(self, timeout_s: float = 20) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.reap(timeout_s)

    def reap(self, timeout_s: float = 20) -> None:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)
        self._stderr.close()


def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return condition()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(bootstrap: str, topic: str, group: str, client: str = "confluent", **cfg: Any) -> Worker:
        config = {
            "client": client,
            "bootstrap": bootstrap,
            "topic": topic,
            "group": group,
            "session_ms": SESSION_TIMEOUT_MS,
            **cfg,
        }
        worker = Worker(tmp_path, f"{client}-{len(workers)}", config)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.kill()


def make_topic(bootstrap: str, topic: str, partitions: int = 6, messages: int = 0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    if messages:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(messages):
            producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % partitions)
        assert producer.flush(15) == 0


def story(workers: list[Worker]) -> str:
    """What each worker reported and wrote to stderr: the message of a failed wait."""
    lines = []
    for w in workers:
        events = [e for e in w.snapshot() if e["ev"] != "msg"]
        stderr = (w.log_dir / f"{w.name}.stderr").read_text(errors="replace")[-2000:]
        lines.append(f"{w.name} (exit {w.proc.poll()}): {events}\n{stderr}")
    return "\n".join(lines)


def assignments(workers: list[Worker]) -> list[set[int]]:
    return [w.assignment or set() for w in workers]


def balanced(workers: list[Worker], partitions: int = 6) -> bool:
    """Every partition owned by exactly one worker, and sizes differ by at most one."""
    owned = assignments(workers)
    union = set().union(*owned)
    sizes = [len(a) for a in owned]
    return union == set(range(partitions)) and sum(sizes) == partitions and max(sizes) - min(sizes) <= 1


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_three_consumers_share_six_partitions(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker], client: str
) -> None:
    make_topic(broker.bootstrap, topic_name, messages=60)
    workers = [spawn(broker.bootstrap, topic_name, f"g-{topic_name}", client=client) for _ in range(3)]
    assert wait_until(lambda: balanced(workers) and all(len(a) == 2 for a in assignments(workers)), 40), (
        story(workers)
    )
    consumed = [m for w in workers for m in w.messages()]
    assert wait_until(lambda: len({m for w in workers for m in w.messages()}) == 60, 20), len(consumed)


@pytest.mark.slow
def test_kafka_python_leader_assigns_from_known_partitions(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker]
) -> None:
    """A lone kafka-python consumer gets every partition in its first generation: it never leads with
    no partition metadata, so it never needs the metadata-driven rejoin that can wedge kafka-python
    3.0.12 (see the module docstring)."""
    make_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    # The group coordinator up first, as for every group but a broker's first (FindCoordinator creating
    # __consumer_offsets slows that first join down enough for the metadata to come in anyway).
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.describe_consumer_groups([group])[group].result(15)
    worker = spawn(broker.bootstrap, topic_name, group, client="kafka-python")
    assert wait_until(lambda: worker.assignment == set(range(6)), 30), story([worker])
    time.sleep(1.5)  # a metadata-driven rejoin would follow within a poll or two
    changes = [(e["ev"], e["partitions"]) for e in worker.snapshot() if e["ev"] in ("assign", "revoke")]
    assert changes == [("revoke", []), ("assign", list(range(6)))], story([worker])


@pytest.mark.slow
def test_members_beyond_partitions_stay_idle_and_mixed_clients_share_a_group(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker]
) -> None:
    """3 consumers, then a 4th..7th: with 7 members on 6 partitions exactly one is idle.

    librdkafka and kafka-python both offer the "range" assignor, so they can share a group.
    """
    make_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    workers = [
        spawn(broker.bootstrap, topic_name, group, client=c)
        for c in ("confluent", "kafka-python", "confluent")
    ]
    assert wait_until(lambda: balanced(workers), 40), story(workers)
    workers += [spawn(broker.bootstrap, topic_name, group) for _ in range(4)]
    assert wait_until(lambda: balanced(workers) and sorted(map(len, assignments(workers)))[0] == 0, 60), (
        story(workers)
    )
    assert sorted(len(a) for a in assignments(workers)) == [0, 1, 1, 1, 1, 1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_killed_member_loses_partitions_within_session_timeout(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker], client: str
) -> None:
    make_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    survivor = spawn(broker.bootstrap, topic_name, group, client=client)
    victim = spawn(broker.bootstrap, topic_name, group, client=client)
    assert wait_until(lambda: balanced([survivor, victim]), 40), story([survivor, victim])
    victim.kill()  # SIGKILL: no LeaveGroup, the broker must notice the silence
    killed_at = time.monotonic()
    assert wait_until(lambda: survivor.assignment == set(range(6)), SESSION_TIMEOUT_MS / 1000 + 10)
    elapsed = time.monotonic() - killed_at
    # Session timeout, then one heartbeat interval for the survivor to hear about the rebalance.
    assert elapsed < SESSION_TIMEOUT_MS / 1000 + 6, elapsed


@pytest.mark.slow
@pytest.mark.parametrize(("first", "second"), [("confluent", "kafka-python"), ("kafka-python", "confluent")])
def test_every_message_consumed_once_across_a_clean_handover(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker], first: str, second: str
) -> None:
    total = 120
    make_topic(broker.bootstrap, topic_name, messages=total)
    group = f"g-{topic_name}"
    one = spawn(broker.bootstrap, topic_name, group, client=first, commit_each=True, max_messages=50)
    assert wait_until(lambda: one.count("closed") == 1, 60), one.snapshot()[-3:]
    one.reap()
    two = spawn(broker.bootstrap, topic_name, group, client=second, commit_each=True)
    assert wait_until(lambda: len(one.messages()) + len(two.messages()) >= total, 60)
    time.sleep(1)  # nothing more may arrive: a duplicate would show up here
    two.terminate()
    seen = one.messages() + two.messages()
    assert len(one.messages()) == 50
    assert len(seen) == len(set(seen)) == total


@pytest.mark.slow
def test_cooperative_sticky_rebalance_keeps_unaffected_assignments(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker]
) -> None:
    make_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    extra = {"partition.assignment.strategy": "cooperative-sticky"}
    a = spawn(broker.bootstrap, topic_name, group, extra=extra)
    b = spawn(broker.bootstrap, topic_name, group, extra=extra)
    assert wait_until(lambda: balanced([a, b]) and all(len(x) == 3 for x in assignments([a, b])), 40)
    time.sleep(1)  # let the a/b rebalance settle before taking the "before" picture
    before = {id(w): set(w.assignment or ()) for w in (a, b)}
    seen = {id(w): len(w.snapshot()) for w in (a, b)}
    c = spawn(broker.bootstrap, topic_name, group, extra=extra)
    assert wait_until(lambda: balanced([a, b, c]) and all(len(x) == 2 for x in assignments([a, b, c])), 40), (
        assignments([a, b, c])
    )
    for w in (a, b):
        kept = set(w.assignment or ())
        assert kept <= before[id(w)]  # sticky: nothing moved between a and b
        later = w.snapshot()[seen[id(w)] :]
        revoked = {p for e in later if e["ev"] == "revoke" for p in e["removed"]}
        # Incremental: only the partition handed to c was revoked, never the ones kept.
        assert not revoked & kept, (revoked, kept)
        assert len(revoked) == 1
        # ...and a lost nothing it kept (an eager rebalance would revoke everything first).
        assert all(set(e["partitions"]) >= kept for e in later if e["ev"] == "revoke")


@pytest.mark.slow
@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_static_member_restart_keeps_partitions_without_rebalance(
    broker: BrokerProcess, topic_name: str, spawn: Callable[..., Worker], client: str
) -> None:
    make_topic(broker.bootstrap, topic_name)
    group = f"g-{topic_name}"
    key = "group.instance.id" if client == "confluent" else "group_instance_id"

    # A restarted Python client can take several seconds to start on a loaded machine; a longer
    # session keeps "restart within the session timeout" true however slow the start.
    def static(name: str) -> Worker:
        extra = {key: name}
        return spawn(
            broker.bootstrap, topic_name, group, client=client, extra=extra, session_ms=STATIC_SESSION_MS
        )

    workers = [static("a"), static("b"), static("c")]
    assert wait_until(lambda: balanced(workers) and all(len(x) == 2 for x in assignments(workers)), 40), (
        story(workers)
    )
    time.sleep(1.5)  # let the last rebalance settle before counting callbacks
    others = [workers[0], workers[2]]
    callbacks_before = [w.count("assign") + w.count("revoke") for w in others]
    b_partitions = workers[1].assignment
    workers[1].kill()
    restarted = static("b")  # well within the session timeout
    assert wait_until(lambda: restarted.assignment is not None, 30), story([*others, restarted])
    assert restarted.assignment == b_partitions
    time.sleep(1.5)
    # No rebalance: the other members saw no revoke or assign at all.
    assert [w.count("assign") + w.count("revoke") for w in others] == callbacks_before


@pytest.mark.slow
def test_group_survives_broker_restart_without_rebalance(
    strom_broker_factory: Callable[..., BrokerProcess], topic_name: str, spawn: Callable[..., Worker]
) -> None:
    """Membership is replayed from __consumer_offsets: live consumers carry on with a heartbeat."""
    b = strom_broker_factory(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"})
    make_topic(b.bootstrap, topic_name, messages=12)
    group = f"g-{topic_name}"
    workers = [spawn(b.bootstrap, topic_name, group, commit_each=True) for _ in range(2)]
    assert wait_until(lambda: balanced(workers) and sum(len(w.messages()) for w in workers) == 12, 40)
    time.sleep(1)
    before = [(w.assignment, w.count("assign") + w.count("revoke")) for w in workers]
    b.restart()
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(12):
        producer.produce(topic_name, value=f"after-{i}".encode(), partition=i % 6)
    assert producer.flush(15) == 0
    assert wait_until(lambda: sum(len(w.messages()) for w in workers) == 24, 40)
    assert [(w.assignment, w.count("assign") + w.count("revoke")) for w in workers] == before
    seen = [m for w in workers for m in w.messages()]
    assert len(seen) == len(set(seen))
