"""A real Strom broker in a child process, for tests: start, stop, kill -9, restart on the same port.

The child is `python -m strom.node` with a data directory of the caller's choosing; the first lines it
prints tell the bound ports (Kafka's, and the HTTP listener's as `http_url`, on an ephemeral port unless
``http.listeners`` is given). An optional command prefix runs it elsewhere (the fault suite uses
``ip netns exec <ns>``, which execs the broker in place, so the PID is still the broker's) and ``host``
is the address it listens on and advertises (127.0.0.1 by default). Every process is stopped by its own
PID (never by name), and every wait is bounded, so a broken broker fails a test instead of hanging the
suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from strom.testing.processes import popen_tied, process_cpu_times, stop_process

_READY = re.compile(r"Strom broker (\d+) listening on ([^:\s]+):(\d+)")
_LISTENER = re.compile(r"Strom broker \d+ listener (\S+) \((\S+)\) on ([^:\s]+):(\d+)")
_HTTP = re.compile(r"Strom broker \d+ HTTP on (https?://\S+?):(\d+)")


class BrokerProcess:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        overrides: dict[str, str] | None = None,
        start_timeout_s: float = 30.0,
        command_prefix: Sequence[str] = (),
        host: str = "127.0.0.1",
        detached: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.detached = detached  # outlives the process that started it (processes.popen_tied)
        self.command_prefix = list(command_prefix)
        self.host = host
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.overrides = dict(overrides or {})
        self.start_timeout_s = start_timeout_s
        self.port = int(self.overrides.pop("port", "0"))
        # The HTTP listener (schema registry) on an ephemeral port unless the caller sets one: a test
        # broker must never take the registry's default port 8081. Kept across restarts, like port.
        self.http_port = 0
        self.http_url: str | None = None
        # Listener name -> advertised "host:port", from the broker's start-up lines.
        self.listeners: dict[str, str] = {}
        self.proc: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.broker.log"

    def start(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("broker already running")
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.data_dir / "logs"),
            "http.listeners": f"http://{self.host}:{self.http_port}",
            **self.overrides,
        }
        cmd = [*self.command_prefix, sys.executable, "-m", "strom.node"]
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        self._log = open(self.log_path, "a")  # noqa: SIM115  (closed in _reap)
        self.proc = popen_tied(
            cmd, tied=not self.detached, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            http = _HTTP.search(line)
            if http:
                self.http_url = f"{http.group(1)}:{http.group(2)}"
                if "http.listeners" not in self.overrides:
                    self.http_port = int(http.group(2))
            named = _LISTENER.search(line)
            if named:
                self.listeners[named.group(1)] = f"{named.group(3)}:{named.group(4)}"
            match = _READY.search(line)
            if match:
                self.port = int(match.group(3))
                return self.bootstrap
        self.kill()
        raise RuntimeError(f"broker did not start; last output {line!r}; log: {self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Graceful stop (SIGTERM, then SIGKILL after `timeout_s`); returns the exit code."""
        if self.proc is None:
            return None
        stop_process(self.proc, timeout_s)
        return self._reap()

    def kill(self) -> None:
        """kill -9: no flush, no checkpoint, exactly like a crash."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reap()

    def cpu_times(self) -> tuple[float, float]:
        """(user, system) CPU seconds the running broker has used, all threads (Linux /proc)."""
        if self.proc is None:
            raise RuntimeError("broker not running")
        return process_cpu_times(self.proc.pid)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def _reap(self) -> int | None:
        code = self.proc.returncode if self.proc is not None else None
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.proc = None
        return code

    def restart(self) -> str:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
