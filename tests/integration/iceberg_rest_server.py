"""SeaweedFS's ``weed mini`` as an Iceberg REST catalog for tests: one process serving the S3 gateway and
the Iceberg REST catalog on 127.0.0.1 ephemeral ports, with a table bucket (the catalog's warehouse)
made at start-up and one S3 identity; stopped by its PID. Starting, the port retry and stopping are
`SeaweedS3Process`'s; only the command and the readiness check differ. The broker reaches it with
``strom.iceberg.catalog.type=rest`` and SigV4-signed catalog requests (`broker_settings`)."""

from __future__ import annotations

import urllib.error
import urllib.request

from strom.testing.seaweedfs_process import ACCESS_KEY, SECRET_KEY, SeaweedS3Process

WAREHOUSE = "warehouse"
_SERVERS = ("master", "volume", "filer", "s3", "admin")


class IcebergRestServer(SeaweedS3Process):
    port_names = (*(n for s in _SERVERS for n in (s, s + ".grpc")), "iceberg")

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.ports['iceberg']}"

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
            "s3.endpoint": self.endpoint_url,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.region": "us-east-1",
        }

    def broker_settings(self) -> dict[str, str]:
        props = self.catalog_properties()
        settings = {"strom.iceberg.catalog.type": "rest", "strom.iceberg.catalog.uri": props.pop("uri")}
        settings["strom.iceberg.warehouse"] = props.pop("warehouse")
        settings.update({f"strom.iceberg.catalog.property.{k}": v for k, v in props.items()})
        return settings

    def command(self, weed: str) -> list[str]:
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        p = self.ports
        return [
            weed,
            "mini",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data}",
            *(f"-{name}.port={p[name]}" for name in _SERVERS),
            *(f"-{name}.port.grpc={p[name + '.grpc']}" for name in _SERVERS),
            f"-s3.port.iceberg={p['iceberg']}",
            "-s3.port.lance=0",
            "-admin.ui=false",
            "-webdav=false",
            f"-s3.config={self._write_identities()}",
            f"-tableBucket={WAREHOUSE}",
        ]

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"{self.catalog_uri}/v1/config?warehouse=s3://{WAREHOUSE}", timeout=1
            ):
                return True
        except urllib.error.HTTPError:
            return True  # the catalog answers, if with an error
        except OSError:
            return False
