"""``strom cluster up|down|describe|elect-leaders`` and ``strom zookeeper``: the local development cluster.

``cluster up`` starts a ZooKeeper (Debian's package) and N brokers on 127.0.0.1, each a separate process
with its own data directory under ``--dir`` (default ``./cluster``), racks assigned in contiguous blocks
(``--racks 2`` with 6 brokers: 0-2 on R1, 3-5 on R2), and each its own HTTP port (the schema registry;
ephemeral unless ``--set http.listeners=...``). It records every PID and address in
``<dir>/cluster.json`` and returns, leaving the processes running; ``cluster down`` stops them by those
PIDs (SIGTERM, then SIGKILL after a timeout), brokers first. ``strom zookeeper`` runs a ZooKeeper in the
foreground until Ctrl-C, SIGTERM or SIGHUP, and stops it on each (ZooKeeper runs in its own session, so
the signal reaches only this process, which must pass it on).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from strom.cli.commands import client_options
from strom.console.cluster import describe_cluster, elect_leaders
from strom.console.errors import ConsoleError
from strom.console.progress import progress
from strom.testing.cluster import LocalCluster
from strom.testing.zookeeper_process import ZooKeeperProcess, zookeeper_available

STATE_FILE = "cluster.json"


def cluster_up(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve()
    state_path = base / STATE_FILE
    if state_path.exists():
        raise ConsoleError(f"{state_path} exists: run 'strom cluster down --dir {args.dir}' first")
    if not zookeeper_available():
        raise ConsoleError("ZooKeeper is not installed (apt-get install zookeeper, and a JRE)")
    overrides = dict(item.split("=", 1) for item in args.set)
    # Detached: the cluster runs on after this command returns, until `strom cluster down`.
    cluster = LocalCluster(base, args.brokers, args.racks, overrides, detached=True)
    try:
        # Steps: ZooKeeper, each broker, then every broker registered.
        with progress("Starting the cluster", args.brokers + 2, "steps") as bar:

            def step(what: str) -> None:
                bar.advance()
                bar.describe(what)

            bootstrap = cluster.start(step)
    except RuntimeError as exc:
        cluster.stop()
        raise ConsoleError(str(exc)) from None
    state = {
        "zookeeper": {"pid": cluster.zookeeper.pid, "connect": cluster.zookeeper.connect},
        "brokers": {
            str(i): {
                "pid": b.proc.pid if b.proc else None,
                "address": b.bootstrap,
                "registry": b.http_url,
                "log": str(b.log_path),
            }
            for i, b in cluster.brokers.items()
        },
        "bootstrap": bootstrap,
    }
    state_path.write_text(json.dumps(state, indent=1))
    print(f"ZooKeeper: {cluster.zookeeper.connect} (pid {cluster.zookeeper.pid})")
    for i, b in cluster.brokers.items():
        registry = f", schema registry {b.http_url}" if b.http_url else ""
        print(f"Broker {i}: {b.bootstrap} (pid {b.proc.pid if b.proc else '-'}){registry}")
    print(f"bootstrap.servers={bootstrap}")
    return 0


def _stop_pid(pid: int | None, timeout_s: float) -> None:
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def cluster_down(args: argparse.Namespace) -> int:
    state_path = Path(args.dir).resolve() / STATE_FILE
    if not state_path.exists():
        raise ConsoleError(f"no running cluster recorded in {state_path}")
    state = json.loads(state_path.read_text())
    for broker_id, broker in sorted(state["brokers"].items()):
        _stop_pid(broker.get("pid"), 30)
        print(f"stopped broker {broker_id}")
    _stop_pid(state["zookeeper"].get("pid"), 15)
    print("stopped ZooKeeper")
    state_path.unlink()
    return 0


def cluster_describe(args: argparse.Namespace) -> int:
    describe_cluster(client_options(args), args.topic, sys.stdout)
    return 0


def cluster_elect_leaders(args: argparse.Namespace) -> int:
    return elect_leaders(client_options(args), args.topic, args.unclean, sys.stdout)


def zookeeper(args: argparse.Namespace) -> int:
    if not zookeeper_available():
        raise ConsoleError("ZooKeeper is not installed (apt-get install zookeeper, and a JRE)")
    zk = ZooKeeperProcess(Path(args.dir).resolve(), port=args.port)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # `kill`, `timeout` and service managers send SIGTERM: without this the JVM outlived the command.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
    try:  # a signal right after the line is printed must still stop ZooKeeper
        print(f"ZooKeeper listening on {zk.start()}", flush=True)
        while zk.proc is not None and zk.proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        zk.stop()
    return 0


def add_cluster_commands(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    cluster = commands.add_parser("cluster", help="run and inspect a local replicated cluster")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start ZooKeeper and N brokers in the background", allow_abbrev=False)
    up.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
    up.add_argument("--racks", type=int, default=0, metavar="K", help="spread brokers over K racks")
    up.add_argument("--dir", default="./cluster", help="state and data directory (default ./cluster)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker config override")
    up.set_defaults(handler="cluster_up")
    down = actions.add_parser("down", help="stop the cluster started by 'up'", allow_abbrev=False)
    down.add_argument("--dir", default="./cluster", help="the directory given to 'up'")
    down.set_defaults(handler="cluster_down")
    describe = actions.add_parser(
        "describe", help="brokers and the per-broker leaders/followers table", parents=[parent]
    )
    describe.add_argument("--topic", action="append", default=[], help="topic to tabulate (repeatable)")
    describe.set_defaults(handler="cluster_describe")
    elect = actions.add_parser("elect-leaders", help="preferred leader election", parents=[parent])
    elect.add_argument("--topic", action="append", default=[], help="limit to a topic (repeatable)")
    elect.add_argument("--unclean", action="store_true", help="unclean election for leaderless partitions")
    elect.set_defaults(handler="cluster_elect_leaders")
    zk = commands.add_parser("zookeeper", help="run a local ZooKeeper in the foreground")
    zk.add_argument("--dir", default="./zookeeper", help="data directory (default ./zookeeper)")
    zk.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    zk.set_defaults(handler="zookeeper")


CLUSTER_HANDLERS = {
    "cluster_up": cluster_up,
    "cluster_down": cluster_down,
    "cluster_describe": cluster_describe,
    "cluster_elect_leaders": cluster_elect_leaders,
    "zookeeper": zookeeper,
}
