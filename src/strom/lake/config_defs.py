"""The broker's Iceberg settings, and the pyiceberg catalog properties they make.

``strom.iceberg.catalog.type`` is ``sql`` (the default: SQLite in the broker's first log dir, a local
warehouse beside it) or ``rest`` (an Iceberg REST catalog at ``strom.iceberg.catalog.uri``).
``strom.iceberg.catalog.uri`` for ``sql`` is an SQLAlchemy URL: brokers of one cluster must share one
catalog (the same database, or a REST catalog), since a partition's next leader resumes from the table.
``strom.iceberg.warehouse`` is a local path or an ``s3://`` URL; for S3 the endpoint and keys are the
object store's (``rsm.config.storage.s3.*`` / ``storage.aws.*``, docs/tiered-storage.md). Any other
pyiceberg catalog property is set as ``strom.iceberg.catalog.property.<name>``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from strom._util.errors import ConfigError

CATALOG_TYPES = ("sql", "rest")
# Broker settings under this prefix are pyiceberg catalog properties, passed on without it (e.g.
# ``rest.sigv4-enabled``, ``rest.signing-name``, ``credential``, ``s3.path-style-access``).
PROPERTY_PREFIX = "strom.iceberg.catalog.property."
_SECRET_WORDS = ("secret", "credential", "token", "password")
CATALOG_NAME = "strom"
NAMESPACE = "strom"
DEFAULT_DIR = "iceberg"  # under the first log dir: catalog.db and warehouse/

# (name, parser name, default, doc), spread into the broker's table like the tiered-storage settings.
LAKE_CONFIGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "strom.iceberg.catalog.type",
        "str",
        "sql",
        "Iceberg topics' catalog: sql (SQLite in the data dir unless strom.iceberg.catalog.uri) or rest.",
    ),
    (
        "strom.iceberg.catalog.uri",
        "str",
        "",
        "The catalog: an SQLAlchemy URL for sql, the REST catalog's URL for rest.",
    ),
    (
        "strom.iceberg.warehouse",
        "str",
        "",
        "Where tables' files go: a local path or s3://bucket/prefix (empty: iceberg/warehouse in the data "
        "dir for sql; the REST catalog's own warehouse for rest).",
    ),
    (
        "strom.iceberg.translation.interval.ms",
        "int",
        "500",
        "How often each leader looks for Iceberg topics' partitions due for translation.",
    ),
    (
        "strom.iceberg.translation.backlog.ms",
        "int",
        "-1",
        "The translation lag up to which a partition's translation runs only on CPU nothing else wants "
        "(SCHED_IDLE); past it translation takes its share of the CPU from produce until the lag is back "
        "under half of it. -1: 10 times the topic's strom.iceberg.target.lag.ms.",
    ),
)


@dataclass(frozen=True)
class CatalogSettings:
    """What opening the catalog needs: pyiceberg's catalog properties."""

    properties: dict[str, str]

    @property
    def kind(self) -> str:
        return self.properties["type"]


def is_lake_property(name: str) -> bool:
    return name.startswith(PROPERTY_PREFIX)


def is_secret_lake_property(name: str) -> bool:
    """A catalog property DescribeConfigs does not show."""
    return is_lake_property(name) and any(word in name.lower() for word in _SECRET_WORDS)


def catalog_settings(
    settings: Mapping[str, str],
    data_dir: str,
    object_store: Mapping[str, str],
    properties: Mapping[str, str] | None = None,
) -> CatalogSettings:
    """The catalog properties from the broker's ``strom.iceberg.*`` values and the object store's.

    Raises:
        ConfigError: an unknown catalog type, or ``rest`` without a URI.
    """
    kind = settings.get("strom.iceberg.catalog.type", "sql") or "sql"
    if kind not in CATALOG_TYPES:
        raise ConfigError(f"strom.iceberg.catalog.type must be one of {CATALOG_TYPES}, not {kind!r}")
    uri = settings.get("strom.iceberg.catalog.uri", "")
    warehouse = settings.get("strom.iceberg.warehouse", "")
    props: dict[str, str] = {"type": kind}
    base = os.path.join(data_dir, DEFAULT_DIR)
    if kind == "sql":
        props["uri"] = uri or "sqlite:///" + os.path.join(base, "catalog.db")
        props["warehouse"] = _location(warehouse or os.path.join(base, "warehouse"))
    else:
        if not uri:
            raise ConfigError("strom.iceberg.catalog.type=rest needs strom.iceberg.catalog.uri")
        props["uri"] = uri
        if warehouse:
            props["warehouse"] = _location(warehouse)
    props.update(s3_properties(object_store))
    props.update(properties or {})
    return CatalogSettings(props)


def _location(warehouse: str) -> str:
    if "://" in warehouse:
        return warehouse
    return "file://" + os.path.abspath(warehouse)


def s3_properties(object_store: Mapping[str, str]) -> dict[str, str]:
    """pyiceberg's S3 file-IO properties from the object store's ``rsm.config.*`` settings (unprefixed)."""
    names = {
        "storage.s3.endpoint.url": "s3.endpoint",
        "storage.s3.region": "s3.region",
        "storage.aws.access.key.id": "s3.access-key-id",
        "storage.aws.secret.access.key": "s3.secret-access-key",
    }
    props = {ours: object_store[theirs] for theirs, ours in names.items() if object_store.get(theirs)}
    if props and "s3.region" not in props:
        props["s3.region"] = "us-east-1"
    return props
