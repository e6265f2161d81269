"""Controller and broker fail-over with many partitions (issue 12): until every partition is led again.

Run by hand; never part of the test suite::

    PYTHONPATH=src python bench/cluster_failover_bench.py [--topics 500] [--partitions 20] [--runs 3]
        [--session-timeout-ms 6000] [--src DIR]

A fresh ZooKeeper and 3 brokers on 127.0.0.1 (``--src``: the ``src`` directory whose ``strom`` the
brokers run, default this checkout's), ``topics`` x ``partitions`` created at replication factor 3 in
CreateTopics batches of ``--batch`` topics, then, ``--runs`` times:

1. **controller kill**: preferred leaders elected (every broker leads a third), every ISR full; then
   ``kill -9`` of the controller. Timed from the kill: ``/controller`` gone (the killed broker's
   ZooKeeper session expired: ``zookeeper.session.timeout.ms``), a new controller elected (both seen
   through ZooKeeper), and *led*: every surviving broker's Metadata (asked of each broker directly)
   names a live leader for every partition. The killed broker is restarted and the cluster waits for
   every ISR to be full again.
2. **broker kill**: preferred leaders again; ``kill -9`` of a broker that is not the controller (it
   leads about a third of the partitions). Timed from the kill: its session expired, and *moved*: no
   surviving broker's Metadata names it as leader, and every partition has a leader. Restarted likewise.

Where the time goes: the controller logs one ``controller timing`` line per fail-over and broker
change (its ZooKeeper reads and writes and the building of LeaderAndIsr/UpdateMetadata); the rest of
"led" after the controller's event is the brokers applying the requests (LeaderAndIsr,
UpdateMetadata) they were sent. Each result is a JSON line; medians at the end. The machine's
1-minute load average is printed with each.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from strom.testing.broker_process import BrokerProcess
from strom.testing.cluster import LocalCluster, PartitionView, broker_metadata

_TIMING = re.compile(
    r"^(\S+ \S+) .*controller timing (\S+): total ([\d.]+) s, "
    r"(?:ZooKeeper|local store) reads (\d+) in ([\d.]+) s, writes (\d+) in ([\d.]+) s, requests ([\d.]+) s"
)


def emit(step: str, **values: Any) -> None:
    print(json.dumps({"step": step, "load_1m": round(os.getloadavg()[0], 2), **values}), flush=True)


def metadata(bootstrap: str) -> tuple[int, PartitionView]:
    return broker_metadata(bootstrap)


def create_topics(bootstrap: str, names: list[str], partitions: int, batch: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000})
    for i in range(0, len(names), batch):
        futures = admin.create_topics(
            [NewTopic(n, partitions, 3) for n in names[i : i + batch]], request_timeout=300
        )
        for future in futures.values():
            future.result(timeout=600)


def wait_for(what: str, check: Any, timeout_s: float = 900.0, step_s: float = 0.05) -> float:
    """Poll ``check()`` until true; returns when (perf_counter)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return time.perf_counter()
        except (ConnectionError, OSError, TimeoutError):
            pass
        time.sleep(step_s)
    raise RuntimeError(f"timed out waiting for {what}")


def all_in_sync(cluster: LocalCluster, expected: int) -> bool:
    for proc in cluster.brokers.values():
        _, parts = metadata(proc.bootstrap)
        if len(parts) < expected or any(len(isr) < 3 or leader < 0 for leader, isr, _ in parts.values()):
            return False
    return True


def balance(cluster: LocalCluster, expected: int) -> None:
    """Preferred leaders everywhere (each broker then leads a third), once every ISR is full."""
    wait_for("every ISR full", lambda: all_in_sync(cluster, expected), step_s=1.0)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    _, parts = metadata(next(iter(cluster.brokers.values())).bootstrap)
    tps = [TopicPartition(t, p) for t, p in parts]
    for i in range(0, len(tps), 2000):
        future = admin.elect_leaders(ElectionType.PREFERRED, tps[i : i + 2000])
        try:
            future.result(timeout=600)
        except Exception as exc:  # ELECTION_NOT_NEEDED for the partitions already led by their first
            if "ELECTION_NOT_NEEDED" not in str(exc) and "not needed" not in str(exc).lower():
                raise

    def balanced() -> bool:
        _, now = metadata(next(iter(cluster.brokers.values())).bootstrap)
        return all(leader == replicas[0] for leader, _, replicas in now.values())

    wait_for("preferred leaders", balanced, step_s=0.5)


def timings_after(log_path: Path, offset: int) -> list[dict[str, Any]]:
    with log_path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    found = []
    for line in text.splitlines():
        m = _TIMING.search(line)
        if m:
            found.append(
                {
                    "event": m.group(2),
                    "total_s": float(m.group(3)),
                    "zk_reads": int(m.group(4)),
                    "zk_read_s": float(m.group(5)),
                    "zk_writes": int(m.group(6)),
                    "zk_write_s": float(m.group(7)),
                    "requests_s": float(m.group(8)),
                }
            )
    return found


def zk_controller(zk: KazooClient) -> int:
    if zk.exists("/controller") is None:
        return -1
    data, _ = zk.get("/controller")
    return int(json.loads(data)["brokerid"])


def log_offsets(cluster: LocalCluster) -> dict[int, int]:
    return {b: p.log_path.stat().st_size for b, p in cluster.brokers.items()}


def kill_and_time(
    cluster: LocalCluster, zk: KazooClient, victim: int, expected: int, kind: str
) -> dict[str, Any]:
    survivors = [p for b, p in cluster.brokers.items() if b != victim]
    offsets = log_offsets(cluster)
    start = time.perf_counter()
    cluster.brokers[victim].kill()
    gone = wait_for(f"/brokers/ids/{victim} gone", lambda: zk.exists(f"/brokers/ids/{victim}") is None)
    elected = gone
    if kind == "controller":
        elected = wait_for("a new controller", lambda: zk_controller(zk) not in (-1, victim))

    def led() -> bool:
        for proc in survivors:
            _, parts = metadata(proc.bootstrap)
            if len(parts) < expected or any(lead < 0 or lead == victim for lead, _, _ in parts.values()):
                return False
        return True

    done = wait_for("every partition led by a live broker", led)
    controller = zk_controller(zk)
    timings = timings_after(cluster.brokers[controller].log_path, offsets[controller])
    return {
        "kind": kind,
        "victim": victim,
        "session_expired_s": round(gone - start, 3),
        "controller_elected_s": round(elected - start, 3),
        "led_s": round(done - start, 3),
        "after_expiry_s": round(done - gone, 3),
        "controller_events": timings,
    }


def restart(cluster: LocalCluster, victim: int, expected: int) -> None:
    cluster.brokers[victim].start()
    wait_for("every ISR full after the restart", lambda: all_in_sync(cluster, expected), step_s=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--topics", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--src", help="the src directory whose strom package the brokers run")
    parser.add_argument("--dir", help="data directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    if args.src:
        os.environ["PYTHONPATH"] = str(Path(args.src).resolve())
    tmp = tempfile.mkdtemp(prefix="strom-failover-", dir=args.dir)
    overrides = {
        "zookeeper.session.timeout.ms": str(args.session_timeout_ms),
        "offsets.topic.num.partitions": "3",
        "auto.leader.rebalance.enable": "false",
    }
    cluster = LocalCluster(
        tmp,
        3,
        overrides=overrides,
        broker_factory=lambda _id, data_dir, settings: BrokerProcess(data_dir, settings, start_timeout_s=900),
    )
    expected = args.topics * args.partitions
    results: list[dict[str, Any]] = []
    zk: KazooClient | None = None
    try:
        cluster.start()
        zk = KazooClient(hosts=cluster.zookeeper.connect)
        zk.start()
        names = [f"f{i:04d}" for i in range(args.topics)]
        start = time.perf_counter()
        create_topics(cluster.bootstrap, names, args.partitions, args.batch)
        wait_for("every partition led", lambda: all_in_sync(cluster, expected), step_s=1.0)
        emit(
            "create", partitions=expected, replication_factor=3, seconds=round(time.perf_counter() - start, 1)
        )
        for rnd in range(args.runs):
            balance(cluster, expected)
            controller = zk_controller(zk)
            result = kill_and_time(cluster, zk, controller, expected, "controller")
            emit("controller-kill", round=rnd, **result)
            results.append(result)
            restart(cluster, controller, expected)
            balance(cluster, expected)
            controller = zk_controller(zk)
            victim = next(b for b in sorted(cluster.brokers) if b != controller)
            result = kill_and_time(cluster, zk, victim, expected, "broker")
            emit("broker-kill", round=rnd, **result)
            results.append(result)
            restart(cluster, victim, expected)
        for kind in ("controller", "broker"):
            mine = [r for r in results if r["kind"] == kind]
            emit(
                f"{kind}-kill-median",
                runs=len(mine),
                led_s=statistics.median(r["led_s"] for r in mine),
                session_expired_s=statistics.median(r["session_expired_s"] for r in mine),
                controller_elected_s=statistics.median(r["controller_elected_s"] for r in mine),
                after_expiry_s=statistics.median(r["after_expiry_s"] for r in mine),
            )
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
