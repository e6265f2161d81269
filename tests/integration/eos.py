"""Exactly-once helpers shared by the integration and cluster suites (no tests here).

`CTP_APP` is a confluent-kafka consume-transform-produce program run as a child process (so that
it can be killed with SIGKILL): it reads ``in-<i>`` records from partition 0 of the source topic
from its group's committed offset, writes ``out-<i>`` to partition 0 of the sink, and commits the
input offsets in the same transaction (`send_offsets_to_transaction`), ten records at a time, until
it has consumed ``total`` inputs; then it prints ``done``. Any error it does not expect is fatal to
it: the test restarts it, and its ``init_transactions`` fences the previous instance and completes or
aborts that instance's transaction first, as an application restarted by its supervisor would.

One call gets a watchdog: `send_offsets_to_transaction` does not honour its timeout in librdkafka
(2.16, confluentinc/librdkafka#5456: the group-coordinator request's deadline is never checked) and
can wait for ever (#5511): the TxnOffsetCommit goes to the group coordinator cached for the group; when
that broker has died and a Metadata response without it (Kafka lists only live brokers, and so does
Strom) has made librdkafka decommission its handle, the request waits for a state change of that
handle, which never comes. The failover had happened and FindCoordinator already named the new
coordinator; nothing asked. So the program dumps its stack and exits when the call outlives its own
timeout by 10 s (`faulthandler.dump_traceback_later`), an error like any other: it is restarted and
fences its stuck transaction. `tests/cluster/test_transactions_cluster.py` reproduces the hang.
SIGUSR1 dumps the stack too (the cluster test sends it before it reports a stall).

`assert_exactly_once` is the checker: a read_committed reader of the sink sees every output once, in
order, and the group's committed input offset is the input's end.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

CTP_APP = """
import faulthandler, os, signal, sys
from confluent_kafka import Consumer, Producer, TopicPartition

faulthandler.register(signal.SIGUSR1)  # where the loop is, on the test's request (a stall)
bootstrap, source, sink, group, txn_id, total = sys.argv[1:7]
# CTP_DEBUG=eos,protocol,broker (say): librdkafka's debug contexts, logged with the rest
debug = {"debug": os.environ["CTP_DEBUG"]} if os.environ.get("CTP_DEBUG") else {}
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2, **debug})
producer.init_transactions(60)  # fences the killed instance and finishes its transaction first
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "isolation.level": "read_committed", **debug})
(committed,) = consumer.committed([TopicPartition(source, 0)], timeout=30)
position = max(committed.offset, 0)
consumer.assign([TopicPartition(source, 0, position)])
while position < int(total):
    msgs = [m for m in consumer.consume(10, timeout=1) if not m.error()]
    if not msgs:
        continue
    producer.begin_transaction()
    for m in msgs:
        producer.produce(sink, m.value().replace(b"in", b"out"), partition=0)
    position = msgs[-1].offset() + 1
    faulthandler.dump_traceback_later(40, exit=True)  # librdkafka #5456/#5511: see eos.py
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, position)], consumer.consumer_group_metadata(), 30
    )
    faulthandler.cancel_dump_traceback_later()
    producer.commit_transaction(60)
print("done", flush=True)
"""


def consume_all(
    bootstrap: str, topic: str, isolation: str, partitions: int = 1, idle_s: float = 2.0
) -> list[bytes]:
    """Every value a consumer of ``isolation`` level sees, stopping after ``idle_s`` without records."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + idle_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg.value())
            deadline = time.monotonic() + idle_s
    finally:
        consumer.close()
    return out


def feed_inputs(bootstrap: str, topic: str, total: int) -> None:
    """``in-0`` .. ``in-<total - 1>`` into partition 0 of ``topic``, acknowledged by all in-sync replicas."""
    feeder = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(total):
        feeder.produce(topic, f"in-{i}".encode(), partition=0)
    assert feeder.flush(60) == 0


class CtpApp:
    """The `CTP_APP` child process for one (source, sink, group, transactional id)."""

    def __init__(
        self, bootstrap: str, source: str, sink: str, group: str, txn_id: str, total: int, log_path: Path
    ) -> None:
        self.args = [sys.executable, "-c", CTP_APP, bootstrap, source, sink, group, txn_id, str(total)]
        self.log_path = log_path  # every instance's stderr (librdkafka's log, tracebacks), appended
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(b"--- start\n")
            self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=log)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (if it is still running) and reap."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.communicate(timeout=10)

    def dump_stack(self) -> None:
        """Have the running program write its Python stack to its log (faulthandler on SIGUSR1)."""
        if self.running and self.proc is not None:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)

    def keep_alive(self) -> bool:
        """Restart the program if it died of an error; True once it has finished (printed ``done``)."""
        if self.proc is None:
            self.start()
            return False
        if self.proc.poll() is None:
            return False
        out, _ = self.proc.communicate(timeout=10)
        if self.proc.returncode == 0 and out.strip() == b"done":
            return True
        self.restarts += 1
        self.start()
        return False

    def finish(self, timeout_s: float) -> None:
        """Until the program has finished, restarting it after each fatal error."""
        deadline = time.monotonic() + timeout_s
        while not self.keep_alive():
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(
                    f"the consume-transform-produce loop did not finish in {timeout_s} s: {self.log_tail()}"
                )
            time.sleep(0.1)


def assert_exactly_once(bootstrap: str, source: str, sink: str, group: str, total: int) -> None:
    """Every output once, in order, for read_committed; the group's input offset at the end."""
    assert consume_all(bootstrap, sink, "read_committed") == [f"out-{i}".encode() for i in range(total)]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (committed,) = consumer.committed([TopicPartition(source, 0)], timeout=30)
    finally:
        consumer.close()
    assert committed.offset == total
