"""`S3Settings`: how to reach one bucket (kept apart from s3.py so that reading settings does not import
botocore: a broker without tiered storage never loads the S3 client)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class S3Settings:
    bucket: str
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    path_style: bool = False
    key_prefix: str = ""
    connect_timeout_ms: int = 10_000
    read_timeout_ms: int = 30_000
    max_attempts: int = 5
    threads: int = 8
