"""A real Spark standalone cluster for tests: one master and one worker from pyspark's own `bin/spark-class`.

Both listen on loopback with ephemeral ports (the master's URL is read from its log), the REST submission
server and web UIs are off or on ephemeral ports, and the daemons get small heaps. The worker launches
each application's executor as its own JVM (`CoarseGrainedExecutorBackend`) under `<work>/app-*/0/`,
which starts its own Python workers. `stop()` ends the worker, then the master, by PID.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from strom.testing.processes import stop_process

_MASTER_URL = re.compile(r"Starting Spark master at (spark://[\d.]+:\d+)")
_START_TIMEOUT_S = 60.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _wait_for(log: Path, pattern: re.Pattern[str], proc: subprocess.Popen[bytes]) -> re.Match[str]:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        found = pattern.search(text)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"no {pattern.pattern!r} in {log} within {_START_TIMEOUT_S} s")


@dataclass
class StandaloneCluster:
    master_url: str
    work_dir: Path
    master: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]

    def executor_dirs(self) -> list[Path]:
        """One directory per executor the worker launched (`app-*/<executor id>`)."""
        return sorted(p for p in self.work_dir.glob("app-*/*") if p.is_dir())

    def stop(self) -> None:
        stop_process(self.worker)
        stop_process(self.master)


def start_cluster(base: Path, *, cores: int = 2, memory: str = "1g") -> StandaloneCluster:
    """Start a master and one worker under `base` (logs, work dir, properties) and wait until registered."""
    home = spark_home()
    spark_class = str(home / "bin" / "spark-class")
    props = base / "spark-defaults.conf"
    props.write_text(
        "spark.master.rest.enabled false\nspark.ui.enabled false\nspark.ui.port 0\n"
        "spark.master.ui.port 0\nspark.worker.ui.port 0\n"
    )
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    master_log, worker_log = base / "master.log", base / "worker.log"
    with master_log.open("wb") as out:
        master = subprocess.Popen(
            [
                *(spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
                *("--port", "0", "--webui-port", "0", "--properties-file", str(props)),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = _wait_for(master_log, _MASTER_URL, master).group(1)
        work = base / "work"
        work.mkdir()
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [
                    *(spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"),
                    *("--port", "0", "--webui-port", "0", "--cores", str(cores), "--memory", memory),
                    *("--work-dir", str(work), "--properties-file", str(props), url),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    except BaseException:
        stop_process(master)
        raise
    cluster = StandaloneCluster(url, work, master, worker)
    try:
        _wait_for(worker_log, re.compile("Successfully registered with master"), worker)
    except BaseException:
        cluster.stop()
        raise
    return cluster
