"""Transactions on a 3-broker ZooKeeper cluster: the transaction coordinator writes markers to partitions
led by other brokers (WriteTxnMarkers), transactional offsets reach a group coordinator on another
broker, and a transaction coordinator killed with SIGKILL is replaced by the new leader of its
``__transaction_state`` partition, which loads the replicated state and keeps serving the producer."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing.cluster import LocalCluster
from tests.integration.eos import CtpApp, assert_exactly_once, consume_all, feed_inputs
from tests.integration.rawclient import RawClient

TXN = {"transaction.state.log.num.partitions": "3"}
DEADLINE_S = float(os.environ.get("TXN_DEADLINE_S", "120"))  # for the outputs between two kills


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])
    futures[name].result(30)


def find_coordinator(bootstrap: str, key: str, key_type: int = 1, timeout_s: float = 30.0) -> int:
    """The broker id FindCoordinator names for ``key`` (key type 1: a transactional id, 0: a group),
    asked of the live brokers in ``bootstrap`` in turn, once one names a coordinator."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, Any] = {}
        for address in bootstrap.split(","):
            try:
                with RawClient(address) as raw:
                    found = raw.call(ApiKey.FIND_COORDINATOR, 1, {"key": key, "key_type": key_type})
            except OSError:
                continue
            if found["error_code"] == 0:
                return int(found["node_id"])
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


def test_markers_and_offsets_reach_other_brokers(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "in", 3)
    create_topic(cluster.bootstrap, "out", 3)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(30):
        feeder.produce("in", value=f"{i}".encode(), partition=i % 3)
    assert feeder.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "eos",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition("in", p, OFFSET_BEGINNING) for p in range(3)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "eos-app"})
    producer.init_transactions(60)
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < 30 and time.monotonic() < deadline:
        got += [m for m in consumer.consume(30, timeout=1) if not m.error()]
    assert len(got) == 30
    producer.begin_transaction()
    for m in got:  # every output partition: at least two are led by brokers other than the coordinator
        producer.produce("out", value=b"out-" + m.value(), partition=m.partition())
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60
    )
    producer.commit_transaction(60)
    producer.begin_transaction()
    for p in range(3):
        producer.produce("out", value=b"aborted", partition=p)
    producer.flush(30)
    producer.abort_transaction(60)

    committed = consume_all(cluster.bootstrap, "out", "read_committed", 3)
    assert sorted(committed) == sorted(b"out-" + m.value() for m in got)
    assert len(consume_all(cluster.bootstrap, "out", "read_uncommitted", 3)) == 33
    offsets = consumer.committed([TopicPartition("in", p) for p in range(3)], timeout=10)
    assert sorted(tp.offset for tp in offsets) == [10, 10, 10]
    consumer.close()


def test_transaction_coordinator_kill9_fails_over(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "out", 3)
    txn_id = f"failover-{uuid.uuid4().hex[:6]}"
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "message.timeout.ms": 60_000}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=f"a-{i}".encode(), partition=i % 3)
    producer.commit_transaction(60)
    coordinator = find_coordinator(cluster.bootstrap, txn_id)
    cluster.brokers[coordinator].kill()
    producer.begin_transaction()
    for i in range(30):
        producer.produce("out", value=f"b-{i}".encode(), partition=i % 3)
    producer.commit_transaction(120)
    assert find_coordinator(cluster.bootstrap, txn_id) != coordinator
    committed = consume_all(cluster.bootstrap, "out", "read_committed", 3)
    assert sorted(committed) == sorted(
        [f"a-{i}".encode() for i in range(30)] + [f"b-{i}".encode() for i in range(30)]
    )


def wait_for_full_isr(cluster: LocalCluster, topics: list[str], timeout_s: float = 60.0) -> None:
    """Until every partition of ``topics`` has a leader and all three replicas in sync again."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            md = admin.list_topics(timeout=5).topics
            if all(p.leader >= 0 and len(p.isrs) == 3 for t in topics for p in md[t].partitions.values()):
                return
        except (KafkaException, KeyError):
            pass
        assert time.monotonic() < deadline, f"the ISRs of {topics} did not fill up again"
        time.sleep(0.3)


def test_consume_transform_produce_while_the_coordinator_is_killed(make_cluster: Any, tmp_path: Path) -> None:
    """Issue 13's exactly-once check on a cluster: a confluent-kafka consume-transform-produce process
    runs (restarted whenever a failure is fatal to it) while the broker that coordinates its
    transactional id (found with FindCoordinator) is killed with SIGKILL at a random point and
    restarted, ``TXN_KILLS`` times (2 in the suite; ``make eos-long`` runs 20), and every second time
    the loop is killed with SIGKILL too; every input reaches the output exactly once, in order, for
    read_committed, with the group's offsets at the input's end. The outputs between two kills must
    reach the sink within ``TXN_DEADLINE_S`` (120 s): a loop that stops making progress fails the test,
    with its stack (SIGUSR1) and the brokers' logs. ``CTP_DEBUG`` turns librdkafka's debug log on."""
    kills = int(os.environ.get("TXN_KILLS", "2"))
    rng = random.Random(int(os.environ.get("TXN_SEED", "13")))
    cluster: LocalCluster = make_cluster(3, **TXN)
    create_topic(cluster.bootstrap, "src", 1)
    create_topic(cluster.bootstrap, "dst", 1)
    chunk = 300  # outputs between two kills
    total = chunk * (kills + 1)
    feed_inputs(cluster.bootstrap, "src", total)
    txn_id, group = f"ctp-{uuid.uuid4().hex[:6]}", "ctp-group"
    app = CtpApp(cluster.bootstrap, "src", "dst", group, txn_id, total, tmp_path / "ctp.log")
    internal = ["src", "dst", "__consumer_offsets", "__transaction_state"]

    def sink_end() -> int:
        """The sink's high watermark, from whichever live broker leads it (-1 if none answers)."""
        for broker in list(cluster.brokers.values()):
            if broker.proc is None:
                continue
            try:
                with RawClient(broker.bootstrap) as raw:
                    answer = raw.list_offset("dst", 0, -1)
            except OSError:
                continue
            if answer["error_code"] == 0:
                return int(answer["offset"])
        return -1

    killed: list[int] = []
    app_kills = 0
    try:
        app.start()
        for k in range(kills):
            deadline = time.monotonic() + DEADLINE_S
            while sink_end() < (k + 1) * chunk:  # markers count too: about a tenth more
                assert not app.keep_alive(), "the loop finished before the kills were done"
                if time.monotonic() > deadline:
                    app.dump_stack()
                    logs = "\n".join(f"broker {i}:\n{b.log_tail(15)}" for i, b in cluster.brokers.items())
                    raise AssertionError(
                        f"no progress before kill {k + 1} (killed {killed}), sink at {sink_end()}\n"
                        f"loop:\n{app.log_tail()}\n{logs}"
                    )
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 0.5))  # a random point: inside or between transactions
            coordinator = find_coordinator(cluster.bootstrap, txn_id)
            cluster.brokers[coordinator].kill()
            killed.append(coordinator)
            time.sleep(rng.uniform(1, 4))  # the loop meets the dead coordinator (and, maybe, leader)
            if k % 2:  # every second time the loop dies too, in whatever state the failover left it
                app.kill()
                app.start()
                app_kills += 1
            cluster.brokers[coordinator].start()
            cluster.wait_for_brokers(3)
            wait_for_full_isr(cluster, internal)
        app.finish(300)
    finally:
        app.kill()
    assert len(killed) == kills
    assert_exactly_once(cluster.bootstrap, "src", "dst", group, total)
    watchdog = app.log_path.read_text(errors="replace").count("Timeout (0:00:40)!")
    print(
        f"\n{total} inputs; coordinators killed: {killed}; loop killed {app_kills} times; "
        f"loop restarts after fatal errors: {app.restarts} ({watchdog} by the send_offsets watchdog)"
    )


# One transactional producer driven line by line on stdin: "commit <offset>" writes out-<offset> and
# sends the group offset <offset> in a transaction (the send under CTP_APP's watchdog, see eos.py);
# "metadata 0" refreshes metadata, as any produce error or the refresh timer would.
STEP_APP = """
import faulthandler, sys
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, source, sink, group, txn_id = sys.argv[1:6]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
producer.init_transactions(30)
meta = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
print("ready", flush=True)
for line in sys.stdin:
    word, offset = line.split()
    if word == "metadata":
        producer.list_topics(timeout=10)
        print("refreshed", flush=True)
        continue
    producer.begin_transaction()
    producer.produce(sink, f"out-{offset}".encode(), partition=0)
    print("sending", offset, flush=True)
    faulthandler.dump_traceback_later(12, exit=True)
    producer.send_offsets_to_transaction([TopicPartition(source, 0, int(offset))], meta, 5)
    faulthandler.cancel_dump_traceback_later()
    producer.commit_transaction(30)
    print("committed", offset, flush=True)
"""


class StepApp:
    def __init__(self, args: list[str], log_path: Path) -> None:
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", STEP_APP, *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )

    def ask(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{line}\n".encode())
        self.proc.stdin.flush()

    def answer(self) -> str:
        """The program's next line ('' once it has exited)."""
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_offsets_sent_after_the_group_coordinator_died(make_cluster: Any, tmp_path: Path) -> None:
    """The stall CI met once (the loop's transaction open, nothing asked, for ever), made deterministic.

    The group coordinator dies between two transactions; the failover names a new one; a Metadata
    response (which, as Kafka's, lists live brokers only) makes librdkafka decommission the dead
    broker's handle; then `send_offsets_to_transaction` sends the TxnOffsetCommit to the coordinator
    it cached, waits for that dead handle to change state and ignores its own timeout (librdkafka
    2.16: confluentinc/librdkafka#5456, #5511; every run here so far). The broker is not asked
    anything, so nothing it answers can help: the program's watchdog must end it (as CTP_APP's does),
    and a restarted instance fences the stuck transaction and commits. A librdkafka that honours the
    timeout or finds the new coordinator commits in the first instance; exactly-once either way."""
    cluster: LocalCluster = make_cluster(3, **TXN)
    group = "stuck-group"
    dead = find_coordinator(cluster.bootstrap, group, key_type=0)
    live = [b for b in cluster.brokers if b != dead]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Leaders away from the broker that dies: only the group coordinator moves.
    topics = [NewTopic(t, 1, replica_assignment=[[*live, dead]]) for t in ("src", "dst")]
    for future in admin.create_topics(topics).values():
        future.result(30)
    txn_id = next(
        t
        for t in (f"step-{uuid.uuid4().hex[:6]}" for _ in range(100))
        if find_coordinator(cluster.bootstrap, t) != dead
    )
    args = [cluster.bootstrap, "src", "dst", group, txn_id]
    log = tmp_path / "step.log"
    first = StepApp(args, log)
    second: StepApp | None = None
    try:
        assert first.answer() == "ready"
        first.ask("commit 1")
        assert (first.answer(), first.answer()) == ("sending 1", "committed 1")
        cluster.brokers[dead].kill()
        deadline = time.monotonic() + 30
        while find_coordinator(cluster.bootstrap, group, key_type=0) == dead:
            assert time.monotonic() < deadline, "the group coordinator did not move"
            time.sleep(0.1)
        first.ask("metadata 0")
        assert first.answer() == "refreshed"
        first.ask("commit 2")
        assert first.answer() == "sending 2"
        outcome = first.answer()  # "committed 2", or '' when the watchdog ended the program
        if outcome != "committed 2":
            assert outcome == "" and first.proc.wait(10) == 1, outcome
            send = 1 + next(i for i, line in enumerate(STEP_APP.splitlines()) if "send_offsets_to" in line)
            assert "Timeout (0:00:12)!\n" in (text := log.read_text(errors="replace")), "not the watchdog"
            assert f"line {send} in <module>" in text, "stuck elsewhere than in send_offsets_to_transaction"
            second = StepApp(args, log)
            assert second.answer() == "ready"  # init_transactions fenced and aborted the stuck one
            second.ask("commit 2")
            assert (second.answer(), second.answer()) == ("sending 2", "committed 2")
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert consume_all(cluster.bootstrap, "dst", "read_committed") == [b"out-1", b"out-2"]
    assert len(consume_all(cluster.bootstrap, "dst", "read_uncommitted")) == 2 + (outcome != "committed 2")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        (committed,) = consumer.committed([TopicPartition("src", 0)], timeout=30)
    finally:
        consumer.close()
    assert committed.offset == 2
    print(
        f"\nlibrdkafka {libversion()[0]}: send_offsets_to_transaction " + ("returned" if outcome else "hung")
    )
