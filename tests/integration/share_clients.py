"""confluent-kafka ``ShareConsumer``s (KIP-932) as child processes.

Each consumer is a process printing one JSON line per event: ``started``, every record it was handed
(partition, offset, delivery count, value) with the verdict it gave, and ``closed``. Its ``mode``:

* ``implicit``: the client accepts each poll's records on the next poll (the default mode);
* ``verdicts``: explicit acknowledgement, by the value's prefix: ``reject-`` rejected, ``release-``
  released (so redelivered until the delivery limit archives it), anything else accepted;
* ``hold``: explicit acknowledgement, but it acknowledges nothing: it polls until it has records,
  then only sleeps (a test SIGKILLs it; its records come back when their locks run out).

In ``verdicts`` mode each ``commit_sync`` the broker confirmed for every partition is reported as
``committed`` with the offsets it accepted; with ``limit``, once that many records were confirmed
accepted the consumer goes on in ``hold`` mode.

SIGTERM makes it close (acknowledgements sent, group left). Processes are stopped by PID.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kip848_clients import Consumer, wait_until

SHARE_CONSUMER = r"""
import json, signal, sys, time
cfg = json.loads(sys.argv[1])
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
def emit(**kw):
    print(json.dumps(kw), flush=True)
from confluent_kafka import AcknowledgeType, ShareConsumer
mode = cfg.get("mode", "implicit")
conf = {
    "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
    "share.acknowledgement.mode": "implicit" if mode == "implicit" else "explicit",
    "max.poll.records": cfg.get("max_poll_records", 500),
}
c = ShareConsumer(conf)
c.subscribe(cfg["topics"])
emit(ev="started")
held = False
accepted, confirmed = [], 0
while not stop:
    if held:
        time.sleep(0.1)
        continue
    try:
        batch = c.poll(0.2)
    except Exception as exc:
        emit(ev="error", error=str(exc))
        time.sleep(0.2)
        continue
    for m in batch:
        if m.error():
            emit(ev="error", error=str(m.error()))
            continue
        value = (m.value() or b"").decode()
        verdict = "accept"
        if mode == "verdicts":
            if value.startswith("reject-"):
                verdict = "reject"
                c.acknowledge(m, AcknowledgeType.REJECT)
            elif value.startswith("release-"):
                verdict = "release"
                c.acknowledge(m, AcknowledgeType.RELEASE)
            else:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                accepted.append(m.offset())
        elif mode == "hold":
            verdict = "hold"
        emit(ev="msg", p=m.partition(), o=m.offset(), n=m.delivery_count(), v=value, verdict=verdict)
    if mode == "hold" and len(batch):
        held = True
    if mode == "verdicts" and len(batch):
        try:
            failed = [str(e) for e in c.commit_sync(30).values() if e is not None]
        except Exception as exc:
            failed = [str(exc)]
        if failed:
            emit(ev="error", error="; ".join(failed))
        else:
            emit(ev="committed", accepted=accepted)
            confirmed += len(accepted)
        accepted = []
        if cfg.get("limit") and confirmed >= cfg["limit"]:
            mode = "hold"  # the next records it gets are held, never acknowledged
    if cfg.get("delay_s"):
        time.sleep(cfg["delay_s"])
c.close()
emit(ev="closed")
"""


@pytest.fixture
def share_consumers() -> Iterator[list[ShareConsumerProcess]]:
    """The consumers a test starts (it appends them), killed at its end."""
    started: list[ShareConsumerProcess] = []
    yield started
    for consumer in started:
        consumer.kill()


class ShareConsumerProcess(Consumer):
    """One share consumer process and the events it reported (see the module docstring)."""

    def __init__(self, log_dir: Path, name: str, cfg: dict[str, Any]) -> None:
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stderr = open(log_dir / f"{name}.stderr", "w")  # noqa: SIM115  (closed in reap)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SHARE_CONSUMER, json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def records(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] == "msg"]

    def offsets(self) -> list[int]:
        return [e["o"] for e in self.records()]

    def confirmed_accepted(self) -> set[int]:
        """The offsets whose ACCEPT the broker confirmed (``verdicts`` mode's ``committed`` events)."""
        return {o for e in self.snapshot() if e["ev"] == "committed" for o in e["accepted"]}

    def held(self) -> set[int]:
        """The offsets it was handed in ``hold`` mode (acquired, never acknowledged)."""
        return {e["o"] for e in self.records() if e["verdict"] == "hold"}


def accept_then_hold(
    log_dir: Path, bootstrap: str, topic: str, group: str, accept: int, consumers: list[ShareConsumerProcess]
) -> ShareConsumerProcess:
    """A consumer (added to ``consumers``) that accepts records, ten per confirmed commit, until
    ``accept`` are confirmed, then holds the next ones it gets; returned once it holds some."""
    cfg = {"bootstrap": bootstrap, "topics": [topic], "group": group, "mode": "verdicts"}
    first = ShareConsumerProcess(
        log_dir, f"accept-then-hold-{len(consumers)}", {**cfg, "max_poll_records": 10, "limit": accept}
    )
    consumers.append(first)
    ready = wait_until(lambda: len(first.confirmed_accepted()) >= accept and bool(first.held()), 90)
    assert ready, first.snapshot()[-5:]
    return first


def assert_the_rest_comes_once(
    log_dir: Path,
    bootstrap: str,
    topic: str,
    group: str,
    total: int,
    first: ShareConsumerProcess,
    consumers: list[ShareConsumerProcess],
) -> None:
    """A new consumer of the group gets every record of ``range(total)`` that ``first`` did not have
    confirmed accepted, each once, the ones ``first`` held included, and none of the accepted ones."""
    accepted = first.confirmed_accepted()
    cfg = {"bootstrap": bootstrap, "topics": [topic], "group": group}
    second = ShareConsumerProcess(log_dir, f"the-rest-{len(consumers)}", cfg)
    consumers.append(second)
    rest = set(range(total)) - accepted
    assert wait_until(lambda: set(second.offsets()) >= rest, 90), sorted(rest - set(second.offsets()))[:20]
    again = set(second.offsets()) & accepted
    assert not again, f"accepted records delivered again: {sorted(again)}"
    assert max(Counter(second.offsets()).values()) == 1
    assert first.held() <= set(second.offsets())
