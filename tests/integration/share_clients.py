"""confluent-kafka ``ShareConsumer``s (KIP-932) as child processes.

Each consumer is a process printing one JSON line per event: ``started``, every record it was handed
(partition, offset, delivery count, value) with the verdict it gave, and ``closed``. Its ``mode``:

* ``implicit``: the client accepts each poll's records on the next poll (the default mode);
* ``verdicts``: explicit acknowledgement, by the value's prefix: ``reject-`` rejected, ``release-``
  released (so redelivered until the delivery limit archives it), anything else accepted;
* ``hold``: explicit acknowledgement, but it acknowledges nothing: it polls until it has records,
  then only sleeps (a test SIGKILLs it; its records come back when their locks run out).

SIGTERM makes it close (acknowledgements sent, group left). Processes are stopped by PID.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.integration.kip848_clients import Consumer

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
        elif mode == "hold":
            verdict = "hold"
        emit(ev="msg", p=m.partition(), o=m.offset(), n=m.delivery_count(), v=value, verdict=verdict)
    if mode == "verdicts" and len(batch):
        c.commit_sync(30)
    if mode == "hold" and len(batch):
        held = True
    if cfg.get("delay_s"):
        time.sleep(cfg["delay_s"])
c.close()
emit(ev="closed")
"""


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
