"""Choosing and building an object store from the ``rsm.config.*`` settings.

The names are those of the widely used open-source S3 plugin for Kafka's tiered storage, without their
``rsm.config.`` prefix (the broker strips it): ``storage.s3.bucket.name`` given means S3, otherwise the
filesystem backend under ``storage.root``; ``storage.backend.class`` may also name either explicitly (any
class name containing ``s3`` or ``filesystem``, so the plugin's own class names work).

=============================================  ===============================================================
``key.prefix``                                 prepended to every object key (both backends)
``storage.root``                               the filesystem backend's directory
``storage.s3.bucket.name``                     the bucket
``storage.s3.endpoint.url``                    e.g. ``http://127.0.0.1:8333`` (default: AWS's endpoint)
``storage.s3.region``                          default ``us-east-1``
``storage.s3.path.style.access.enabled``       bucket in the URL path (default false)
``storage.aws.access.key.id``                  credentials (default: botocore's chain: environment, files)
``storage.aws.secret.access.key``
``storage.s3.api.call.attempt.timeout``        read timeout of one attempt, ms (default 30000)
``storage.s3.connect.timeout.ms``              connect timeout, ms (default 10000) (Strom's name)
``storage.s3.retry.max.attempts``              attempts per call, backoff between them (default 5) (Strom's)
=============================================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Mapping

from strom._util.errors import ConfigError
from strom.objectstore.local import LocalObjectStore
from strom.objectstore.s3_settings import S3Settings
from strom.objectstore.store import ObjectStore

BACKEND_CLASS = "storage.backend.class"
ROOT = "storage.root"
KEY_PREFIX = "key.prefix"
BUCKET = "storage.s3.bucket.name"


def _bool(name: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low not in ("true", "false"):
        raise ConfigError(f"rsm.config.{name}: expected true or false, got {raw!r}")
    return low == "true"


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"rsm.config.{name}: not an integer: {raw!r}") from None


def uses_s3(settings: Mapping[str, str]) -> bool:
    backend = settings.get(BACKEND_CLASS, "").lower()
    if "filesystem" in backend:
        return False
    return "s3" in backend or BUCKET in settings


def s3_settings(settings: Mapping[str, str]) -> S3Settings:
    bucket = settings.get(BUCKET)
    if not bucket:
        raise ConfigError(f"rsm.config.{BUCKET} is required for the S3 backend")
    return S3Settings(
        bucket=bucket,
        endpoint_url=settings.get("storage.s3.endpoint.url") or None,
        region=settings.get("storage.s3.region", "us-east-1"),
        access_key_id=settings.get("storage.aws.access.key.id") or None,
        secret_access_key=settings.get("storage.aws.secret.access.key") or None,
        path_style=_bool(
            "storage.s3.path.style.access.enabled",
            settings.get("storage.s3.path.style.access.enabled", "false"),
        ),
        key_prefix=settings.get(KEY_PREFIX, ""),
        connect_timeout_ms=_int(
            "storage.s3.connect.timeout.ms", settings.get("storage.s3.connect.timeout.ms", "10000")
        ),
        read_timeout_ms=_int(
            "storage.s3.api.call.attempt.timeout",
            settings.get("storage.s3.api.call.attempt.timeout", "30000"),
        ),
        max_attempts=_int(
            "storage.s3.retry.max.attempts", settings.get("storage.s3.retry.max.attempts", "5")
        ),
    )


def open_object_store(settings: Mapping[str, str], default_root: str) -> ObjectStore:
    """The store ``settings`` (``rsm.config.*`` without the prefix) describe; the filesystem backend
    under ``default_root`` when they name neither backend's location."""
    if uses_s3(settings):
        from strom.objectstore.s3 import S3ObjectStore  # botocore is imported only when S3 is used

        return S3ObjectStore(s3_settings(settings))
    return LocalObjectStore(settings.get(ROOT) or default_root, key_prefix=settings.get(KEY_PREFIX, ""))
