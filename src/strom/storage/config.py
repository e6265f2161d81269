"""Per-topic log configuration (`LogConfig`), named and defaulted as Kafka's topic configs.

`LOG_CONFIG_DEFS` is the table of (Kafka name, field, type, default, doc): `from_properties` parses
string overrides through it, `to_properties` renders a config back to Kafka's strings, and
DescribeConfigs can compare a topic's overrides against the defaults row by row.
Invalid names or values raise ``KafkaError(INVALID_CONFIG)`` with a message naming the property.

Deprecated names that Kafka 3.x still accepts are accepted too, so that existing tooling and scripts
keep working: ``message.format.version`` (deprecated in 3.0; every batch is magic 2 whatever it says,
as in Kafka 3.x, so it is stored, validated as a version string and otherwise ignored),
``message.downconversion.enable`` (a no-op here: Strom serves Fetch v4+ only, so it never
down-converts) and ``message.timestamp.difference.max.ms`` (deprecated in 3.6, KIP-937; as in Kafka
it still applies, as the before and after bounds that are not set themselves).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.records.compression import CompressionType

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
DAY_MS = 24 * 60 * 60 * 1000

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# The empty list is Kafka's too (its ValidList allows it): neither deletion nor compaction, so the log
# is kept whole; an IncrementalAlterConfigs SUBTRACT of the last policy leaves it.
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "")
# "producer" stores batches as the producer compressed them (no decoding); any other value makes the
# leader recompress batches of another codec on append (log_validator.py), as Kafka does.
CODEC_BY_COMPRESSION_TYPE = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
COMPRESSION_TYPES = ("producer", *CODEC_BY_COMPRESSION_TYPE)
# Iceberg topics' modes (strom.lake.modes says what each writes); disabled: no table.
ICEBERG_MODES = ("disabled", "key_value", "value_schema_id_prefix")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level log settings; field names are the snake_case of Kafka's dotted names."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    delete_retention_ms: int = DAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    compression_type: str = "producer"
    unclean_leader_election_enable: bool = False
    file_delete_delay_ms: int = 60_000
    message_format_version: str = "3.0-IV1"  # deprecated, ignored (always magic 2)
    message_downconversion_enable: bool = True  # a no-op: Fetch v4+ only, never down-converted
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated; fallback for before/after
    # Tiered storage (KIP-405): copy rolled segments to object storage; local retention -2 = as total.
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    # Iceberg topics (strom.lake): the table a topic's committed records are translated into.
    strom_iceberg_mode: str = "disabled"
    strom_iceberg_target_lag_ms: int = 60_000
    # Iceberg table maintenance (strom.lake.compaction), by the leader of the topic's partition 0.
    strom_iceberg_compaction_interval_ms: int = 300_000
    strom_iceberg_compaction_min_files: int = 8
    strom_iceberg_compaction_target_file_bytes: int = 128 * 1024 * 1024
    strom_iceberg_snapshot_retention_ms: int = DAY_MS
    strom_iceberg_orphan_file_age_ms: int = 3 * DAY_MS  # Iceberg's own default for orphan removal
    strom_iceberg_delete: bool = True  # deleting the topic drops its tables
    # Derived: a client's batches are stored as sent (codec kept, CreateTime, no timestamp bounds, no
    # key check): the produce path's fast case (log_append.py). Not a setting.
    stores_as_sent: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        as_sent = (
            self.compression_type == "producer"
            and not self.log_append_time
            and not self.compact_enabled
            and self.message_timestamp_before_max_ms >= LONG_MAX
            and self.message_timestamp_after_max_ms >= LONG_MAX
        )
        object.__setattr__(self, "stores_as_sent", as_sent)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def target_codec(self) -> CompressionType | None:
        """The codec every stored batch must use, or None for ``producer`` (keep the producer's)."""
        return CODEC_BY_COMPRESSION_TYPE.get(self.compression_type)

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy

    @classmethod
    def from_properties(cls, overrides: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Apply Kafka-named string ``overrides`` on top of ``defaults``. The brokers ask this for a
        topic's config on hot paths (each remote read, the remote log manager's rounds over every
        partition), so results are kept (the configs are immutable): parsing and validating cost
        about 30 us, the lookup about 2.

        Raises:
            KafkaError: INVALID_CONFIG for an unknown name or a value of the wrong type or range.
        """
        return _resolved(tuple(overrides.items()), defaults)

    @classmethod
    def _resolve(cls, overrides: tuple[tuple[str, str], ...], defaults: LogConfig | None) -> LogConfig:
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, raw in overrides:
            definition = CONFIG_BY_NAME.get(name)
            if definition is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            changes[definition.field] = definition.parse(name, raw)
        difference = changes.get("message_timestamp_difference_max_ms")
        if difference is not None:  # the deprecated bound stands in for the ones not given (KIP-937)
            changes.setdefault("message_timestamp_before_max_ms", difference)
            changes.setdefault("message_timestamp_after_max_ms", difference)
        config = dataclasses.replace(base, **changes)
        config.validate()
        return config

    def to_properties(self) -> dict[str, str]:
        """Every setting as Kafka's name -> string value."""
        return {d.name: d.render(getattr(self, d.field)) for d in LOG_CONFIG_DEFS}

    def overrides_against(self, defaults: LogConfig) -> dict[str, str]:
        """Only the settings that differ from ``defaults`` (what DescribeConfigs reports as topic-level)."""
        return {
            d.name: d.render(getattr(self, d.field))
            for d in LOG_CONFIG_DEFS
            if getattr(self, d.field) != getattr(defaults, d.field)
        }

    def validate(self) -> None:
        """Cross-field and range checks Kafka's `LogConfig.validate` makes."""
        _require(self.segment_bytes >= 14, "segment.bytes", "must be at least 14")
        _require(self.segment_ms >= 1, "segment.ms", "must be at least 1")
        _require(self.segment_index_bytes >= 12, "segment.index.bytes", "must be at least 12")
        _require(self.index_interval_bytes >= 0, "index.interval.bytes", "must be non-negative")
        _require(self.retention_ms >= -1, "retention.ms", "must be -1 or more")
        _require(self.flush_messages >= 1, "flush.messages", "must be at least 1")
        _require(self.flush_ms >= 0, "flush.ms", "must be non-negative")
        _require(self.max_message_bytes >= 0, "max.message.bytes", "must be non-negative")
        _require(self.min_insync_replicas >= 1, "min.insync.replicas", "must be at least 1")
        _require(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0, "min.cleanable.dirty.ratio", "must be in [0,1]"
        )
        _require(self.delete_retention_ms >= 0, "delete.retention.ms", "must be non-negative")
        _require(self.min_compaction_lag_ms >= 0, "min.compaction.lag.ms", "must be non-negative")
        _require(self.file_delete_delay_ms >= 0, "file.delete.delay.ms", "must be non-negative")
        _require(self.strom_iceberg_target_lag_ms >= 1, "strom.iceberg.target.lag.ms", "must be at least 1")
        _require(
            self.strom_iceberg_compaction_interval_ms >= -1,
            "strom.iceberg.compaction.interval.ms",
            "must be -1 or more",
        )
        _require(
            self.strom_iceberg_compaction_min_files >= 2,
            "strom.iceberg.compaction.min.files",
            "must be at least 2",
        )
        _require(
            self.strom_iceberg_compaction_target_file_bytes >= 1,
            "strom.iceberg.compaction.target.file.bytes",
            "must be at least 1",
        )
        _require(
            self.strom_iceberg_snapshot_retention_ms >= -1,
            "strom.iceberg.snapshot.retention.ms",
            "must be -1 or more",
        )
        _require(
            self.strom_iceberg_orphan_file_age_ms >= -1,
            "strom.iceberg.orphan.file.age.ms",
            "must be -1 or more",
        )
        _require(self.local_retention_ms >= -2, "local.retention.ms", "must be -2, -1 or more")
        _require(self.local_retention_bytes >= -2, "local.retention.bytes", "must be -2, -1 or more")
        _require(
            not (self.remote_storage_enable and self.compact_enabled),
            "remote.storage.enable",
            "remote log storage is unsupported for compacted topics",
        )
        if self.remote_storage_enable and self.remote_log_copy_disable:
            # KIP-950: nothing more is copied, so the local log must keep all that retention keeps
            for local, total, name in (
                (self.local_retention_ms, self.retention_ms, "ms"),
                (self.local_retention_bytes, self.retention_bytes, "bytes"),
            ):
                _require(
                    local in (-2, total),
                    f"local.retention.{name}",
                    f"must be -2 or equal retention.{name} ({total}) with remote.log.copy.disable=true, "
                    "since nothing more is copied to remote storage",
                )
        if self.retention_ms >= 0 and self.local_retention_ms >= -1:
            _require(
                0 <= self.local_retention_ms <= self.retention_ms,
                "local.retention.ms",
                f"must not be more than retention.ms ({self.retention_ms})",
            )
        if self.retention_bytes >= 0 and self.local_retention_bytes >= -1:
            _require(
                0 <= self.local_retention_bytes <= self.retention_bytes,
                "local.retention.bytes",
                f"must not be more than retention.bytes ({self.retention_bytes})",
            )


def effective_min_isr(min_insync_replicas: int, replica_count: int) -> int:
    """``min.insync.replicas`` capped by the replication factor (and at least 1): the one rule both the
    leaders (acks=all, the high watermark) and the controller (eligible leader replicas) apply."""
    return max(1, min(min_insync_replicas, replica_count or 1))


def _require(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value for {name}: {why}")


def _parse_int(name: str, raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: not an integer"
        ) from None
    if not -(1 << 63) <= value <= LONG_MAX:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: out of range")
    return value


def _parse_float(name: str, raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: not a number"
        ) from None


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: expected true or false"
        )
    return value == "true"


_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?(-IV\d+)?$")


def _parse_version(name: str, raw: str) -> str:
    """A Kafka release version such as 0.10.0, 0.10.0.0, 2.8 or 3.0-IV1 (what Kafka's validator accepts).

    Kafka reads a version starting "0." by its first three dot-separated parts and any other by its
    first two, ignoring the rest: 0.10.0.0 is 0.10.0, 2.8.1 is 2.8. The value is kept as given.
    """
    value = raw.strip()
    parts = value.split(".")
    key = ".".join(parts[: 3 if value.startswith("0.") else 2])
    if not _VERSION.match(key):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: not a Kafka version")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = ",".join(part.strip() for part in raw.split(","))
        if value == "delete,compact":
            value = "compact,delete"
        if value not in options:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"Invalid value {raw!r} for {name}: expected one of {options}"
            )
        return value

    return parse


class ConfigDef(NamedTuple):
    """One row of the topic config table."""

    name: str
    field: str
    type: str  # Kafka's ConfigType name: LONG, INT, DOUBLE, BOOLEAN, STRING, LIST
    doc: str
    parser: Callable[[str, str], Any]

    @property
    def default(self) -> Any:
        return getattr(LogConfig(), self.field)

    def parse(self, name: str, raw: str) -> Any:
        return self.parser(name, raw)

    def render(self, value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)


def _row(name: str, kind: str, doc: str, parser: Callable[[str, str], Any] = _parse_int) -> ConfigDef:
    return ConfigDef(name, name.replace(".", "_"), kind, doc, parser)


LOG_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    _row("segment.bytes", "INT", "Segment file size; a new segment is rolled before it would be exceeded."),
    _row("segment.ms", "LONG", "Roll a new segment after this long even if it is not full."),
    _row("segment.index.bytes", "INT", "Maximum size of a segment's offset and time index."),
    _row("index.interval.bytes", "INT", "Bytes of batches between two index entries."),
    _row("retention.ms", "LONG", "Delete segments whose newest timestamp is older than this; -1 keeps all."),
    _row("retention.bytes", "LONG", "Delete oldest segments while the partition is larger; -1 disables."),
    _row("flush.messages", "LONG", "Fsync after this many messages; the default leaves flushing to the OS."),
    _row("flush.ms", "LONG", "Fsync when data is older than this; the default leaves flushing to the OS."),
    _row("max.message.bytes", "INT", "Largest record batch the topic accepts."),
    _row("message.timestamp.type", "STRING", "CreateTime or LogAppendTime.", _choice(TIMESTAMP_TYPES)),
    _row("message.timestamp.before.max.ms", "LONG", "Largest allowed age of a CreateTime timestamp."),
    _row("message.timestamp.after.max.ms", "LONG", "Largest allowed future skew of a CreateTime timestamp."),
    _row(
        "cleanup.policy",
        "LIST",
        "delete, compact, both, or empty (the log is kept whole).",
        _choice(CLEANUP_POLICIES),
    ),
    _row("min.insync.replicas", "INT", "Replicas that must acknowledge an acks=all produce."),
    _row("delete.retention.ms", "LONG", "How long tombstones survive compaction."),
    _row(
        "min.cleanable.dirty.ratio",
        "DOUBLE",
        "Dirty fraction that makes a log eligible for compaction.",
        _parse_float,
    ),
    _row("min.compaction.lag.ms", "LONG", "Minimum age before a record may be compacted."),
    _row(
        "compression.type",
        "STRING",
        "Codec of stored batches: producer (as sent), uncompressed, gzip, snappy, lz4 or zstd.",
        _choice(COMPRESSION_TYPES),
    ),
    _row(
        "unclean.leader.election.enable",
        "BOOLEAN",
        "Allow out-of-sync replicas to become leader.",
        _parse_bool,
    ),
    _row("file.delete.delay.ms", "LONG", "Delay before deleting a file from the filesystem."),
    _row(
        "message.format.version",
        "STRING",
        "Deprecated since Kafka 3.0 and ignored: batches are always magic 2.",
        _parse_version,
    ),
    _row(
        "message.downconversion.enable",
        "BOOLEAN",
        "Accepted for compatibility; Strom never down-converts (Fetch v4+ only).",
        _parse_bool,
    ),
    _row(
        "message.timestamp.difference.max.ms",
        "LONG",
        "Deprecated since Kafka 3.6: the before/after bounds that are not set themselves.",
    ),
    _row("remote.storage.enable", "BOOLEAN", "Copy rolled segments to remote (object) storage.", _parse_bool),
    _row(
        "local.retention.ms",
        "LONG",
        "With remote storage: how long segments stay on local disk once remote; -2 = retention.ms.",
    ),
    _row(
        "local.retention.bytes",
        "LONG",
        "With remote storage: local size kept once segments are remote; -2 = retention.bytes.",
    ),
    _row("remote.log.copy.disable", "BOOLEAN", "Stop copying segments to remote storage.", _parse_bool),
    _row(
        "remote.log.delete.on.disable",
        "BOOLEAN",
        "Delete the remote data when remote.storage.enable is turned off.",
        _parse_bool,
    ),
    _row(
        "strom.iceberg.mode",
        "STRING",
        "Iceberg topic: disabled, key_value (key and value as bytes) or value_schema_id_prefix (values "
        "decoded with their registry schema into columns).",
        _choice(ICEBERG_MODES),
    ),
    _row(
        "strom.iceberg.target.lag.ms", "LONG", "Iceberg topic: longest time between two commits to its table."
    ),
    _row(
        "strom.iceberg.compaction.interval.ms",
        "LONG",
        "Iceberg topic: how often its tables' small files are compacted and old snapshots expired; -1 never.",
    ),
    _row(
        "strom.iceberg.compaction.min.files",
        "INT",
        "Iceberg topic: the fewest small files of one table partition (hour) that are rewritten as one.",
    ),
    _row(
        "strom.iceberg.compaction.target.file.bytes",
        "LONG",
        "Iceberg topic: data files smaller than this are small; a rewrite writes at most this much.",
    ),
    _row(
        "strom.iceberg.snapshot.retention.ms",
        "LONG",
        "Iceberg topic: how long its tables keep a snapshot that is not the current one; -1 forever.",
    ),
    _row(
        "strom.iceberg.orphan.file.age.ms",
        "LONG",
        "Iceberg topic: files in its tables' locations that no snapshot kept names (a refused or "
        "interrupted commit's) are deleted once older than this; -1 never.",
    ),
    _row(
        "strom.iceberg.delete",
        "BOOLEAN",
        "Iceberg topic: deleting the topic drops its tables (false: they stay, and a topic created again "
        "under the name moves them aside as <table>~<topic id>).",
        _parse_bool,
    ),
)

CONFIG_BY_NAME: dict[str, ConfigDef] = {d.name: d for d in LOG_CONFIG_DEFS}


@functools.lru_cache(maxsize=1024)
def _resolved(overrides: tuple[tuple[str, str], ...], defaults: LogConfig | None) -> LogConfig:
    """`LogConfig.from_properties`, kept per (overrides, defaults); a refusal is raised, never kept."""
    return LogConfig._resolve(overrides, defaults)
