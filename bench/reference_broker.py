"""The brokers a C-tool benchmark compares: Strom from a given ``src`` tree, or librdkafka's in-memory
mock cluster as a reference broker.

The mock cluster ships inside librdkafka for the client's own tests; `bench/mock_broker.c` runs one
mock broker as a process of its own on a loopback port, with its topics made at start (it has no
CreateTopics). It is C, keeps records in memory and validates little, so under the same
`rdkafka_performance` run it shows what the client and this machine allow when the broker costs almost
nothing: a ceiling no durable broker can pass, the same role a native in-memory broker such as Tansu
plays in issue 8. Build it with `bench/build_mock_broker.sh LIBRDKAFKA_SOURCE_DIR` (after
`bench/build_rdkafka_perf.sh`); pass the printed path as `--reference`.

`MockBroker` offers the part of `strom.testing.BrokerProcess` the benchmarks use: `start()` returns the
bootstrap address, `cpu_times()` the process's user and system seconds, `stop()`. `start_variant` starts
either, with its topics.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess
from strom.testing.processes import process_cpu_times, stop_process


class MockBroker:
    def __init__(self, binary: str, topics: dict[str, int]) -> None:
        self.binary = binary
        self.topics = topics
        self.bootstrap = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> str:
        specs = [f"{name}:{count}" for name, count in self.topics.items()]
        proc = subprocess.Popen(
            [self.binary, *specs], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # the bootstrap, printed once the topics exist
        if not line:
            self.stop()
            raise RuntimeError(f"{self.binary} printed no bootstrap address (exit {proc.poll()})")
        self.bootstrap = line
        return line

    def cpu_times(self) -> tuple[float, float]:
        assert self._proc is not None
        return process_cpu_times(self._proc.pid)

    def stop(self, timeout_s: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the mock serves until its stdin closes
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_process(proc, timeout_s)


def start_variant(
    src: str,
    data_dir: Path,
    topics: dict[str, int],
    overrides: dict[str, str] | None = None,
    start_timeout_s: float = 30.0,
) -> BrokerProcess | MockBroker:
    """A started broker holding ``topics`` (name: partitions, replication factor 1): the mock broker if
    ``src`` is a file (a ``--reference`` binary), else a Strom broker run from the ``src`` tree in
    ``data_dir`` with broker settings ``overrides``."""
    if Path(src).is_file():
        mock = MockBroker(src, topics)
        mock.start()
        return mock
    broker = BrokerProcess(data_dir, dict(overrides or {}), start_timeout_s=start_timeout_s)
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src  # the broker child inherits it
    try:
        broker.start()
    finally:
        if env_before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_before
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # must outlive its futures
        futures = admin.create_topics([NewTopic(name, count, 1) for name, count in topics.items()])
        for future in futures.values():
            future.result(timeout=120)
    except BaseException:
        broker.stop()
        raise
    return broker
