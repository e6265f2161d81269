"""The parts of ``confluent_kafka.admin`` the console tools use, re-exported with types.

``confluent_kafka.admin`` is the documented import path for these classes, but its ``__init__``
imports them from private modules without listing them in ``__all__``, so ``mypy --strict`` (no
implicit re-export) rejects importing them from there, and ``OffsetSpec``'s factory methods carry no
annotations. Both problems are absorbed here, once, instead of with ignores at every use.
"""

from __future__ import annotations

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AlterConfigOpType",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "ResourcePatternType",
    "ResourceType",
    "earliest_spec",
    "latest_spec",
    "timestamp_spec",
]


def earliest_spec() -> OffsetSpec:
    """ListOffsets query for the log start offset."""
    spec: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    return spec


def latest_spec() -> OffsetSpec:
    """ListOffsets query for the log end offset."""
    spec: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    return spec


def timestamp_spec(timestamp_ms: int) -> OffsetSpec:
    """ListOffsets query for the first offset whose timestamp is >= ``timestamp_ms``."""
    spec: OffsetSpec = OffsetSpec.for_timestamp(timestamp_ms)
    return spec
