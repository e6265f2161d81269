"""A real ZooKeeper server (Debian's ``zookeeper`` package) in a child process, for tests and dev clusters.

Standalone mode: a generated ``zoo.cfg`` in the caller's directory (own ``dataDir``, a client port on
``host``, loopback by default, short ``tickTime`` so that small session timeouts are allowed), started as
``java -cp /usr/share/java/zookeeper.jar:... org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg``,
behind an optional command prefix (``ip netns exec <ns>`` in the fault suite; it execs in place).
Readiness is checked with the ``ruok`` four-letter command. The process is stopped by its own PID.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from strom.testing.processes import popen_tied, stop_process

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ZooKeeperProcess:
    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        port: int = 0,
        tick_time_ms: int = 500,
        command_prefix: Sequence[str] = (),
        host: str = "127.0.0.1",
        detached: bool = False,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.detached = detached  # outlives the process that started it (processes.popen_tied)
        self.host = host
        self.command_prefix = list(command_prefix)
        # Inside a network namespace of its own every port is free; loopback ports are picked here.
        self.port = port or (free_port() if host == "127.0.0.1" else 2181)
        self.tick_time_ms = tick_time_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def write_config(self) -> Path:
        data = self.base_dir / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.base_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            "maxSessionTimeout=60000\n"
        )
        return cfg

    def command(self) -> list[str]:
        classpath = f"{ZOOKEEPER_CONF_DIR}:{ZOOKEEPER_JAR}"
        return [
            *self.command_prefix,
            shutil.which("java") or "java",
            "-Xmx256m",
            "-cp",
            classpath,
            f"-Dzookeeper.log.dir={self.base_dir}",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.write_config()),
        ]

    def start(self, timeout_s: float = 30.0) -> str:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.base_dir / "zookeeper.log", "ab")  # noqa: SIM115  (closed in stop)
        self.proc = popen_tied(
            self.command(), tied=not self.detached, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.ruok():
                return self.connect
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start on {self.connect}; see {self.base_dir}/zookeeper.log")

    def ruok(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
