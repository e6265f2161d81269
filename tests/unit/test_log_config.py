"""LogConfig: Kafka topic config names parsed, defaulted and refused as Kafka (and Strom's limits) say."""

from __future__ import annotations

import pytest

from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.config import LogConfig


def test_overrides_apply_on_top_of_defaults() -> None:
    base = LogConfig.from_properties({"retention.ms": "1000"})
    config = LogConfig.from_properties({"cleanup.policy": "delete,compact"}, base)
    assert config.retention_ms == 1000
    assert config.cleanup_policy == "compact,delete"
    assert config.to_properties()["retention.ms"] == "1000"


def test_a_config_is_resolved_once_per_overrides_and_defaults() -> None:
    """Kept: the same overrides on the same defaults give the same (immutable) config, any change of
    either a new one; a refusal is raised again, never kept."""
    base = LogConfig.from_properties({"retention.ms": "1000"})
    overrides = {"segment.bytes": "8388608", "remote.storage.enable": "true"}
    config = LogConfig.from_properties(overrides, base)
    assert LogConfig.from_properties(dict(overrides), base) is config
    changed = LogConfig.from_properties({**overrides, "segment.bytes": "4194304"}, base)
    assert (changed.segment_bytes, config.segment_bytes) == (4194304, 8388608)
    other_base = LogConfig.from_properties({"retention.ms": "2000"})
    assert LogConfig.from_properties(overrides, other_base).retention_ms == 2000
    for _ in range(2):
        with pytest.raises(KafkaError):
            LogConfig.from_properties({"retention.ms": "soon"}, base)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("retention.msx", "1"),  # unknown name
        ("retention.ms", "soon"),  # not a number
        ("cleanup.policy", "archive"),
        ("message.timestamp.type", "WallClock"),
        ("compression.type", "brotli"),
    ],
)
def test_invalid_configs_are_refused_with_invalid_config(name: str, value: str) -> None:
    with pytest.raises(KafkaError) as info:
        LogConfig.from_properties({name: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert name in str(info.value)


@pytest.mark.parametrize(
    ("value", "codec"),
    [("producer", None), ("uncompressed", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)],
)
def test_every_kafka_compression_type_is_accepted(value: str, codec: int | None) -> None:
    config = LogConfig.from_properties({"compression.type": value})
    assert config.target_codec == codec
    assert config.to_properties()["compression.type"] == value


def test_deprecated_kafka_names_are_accepted() -> None:
    config = LogConfig.from_properties(
        {"message.format.version": "2.8", "message.downconversion.enable": "false"}
    )
    assert (config.message_format_version, config.message_downconversion_enable) == ("2.8", False)
    assert config.to_properties()["message.format.version"] == "2.8"
    assert LogConfig.from_properties({"message.format.version": "0.10.2-IV0"}).message_format_version
    # a 0.x release is read by its first three parts, as Kafka reads it; other releases by two
    for good in ("0.10.0.0", "0.8.2.1", "2.8.1", "3.0-IV1"):
        assert LogConfig.from_properties({"message.format.version": good}).message_format_version == good
    for bad in ("latest", "0.x.1.0", "2", ""):
        with pytest.raises(KafkaError) as info:
            LogConfig.from_properties({"message.format.version": bad})
        assert info.value.code == ErrorCode.INVALID_CONFIG


def test_empty_cleanup_policy_keeps_the_log_whole() -> None:
    config = LogConfig.from_properties({"cleanup.policy": ""})
    assert (config.delete_enabled, config.compact_enabled) == (False, False)
    assert config.to_properties()["cleanup.policy"] == ""


def test_timestamp_difference_max_ms_stands_in_for_unset_bounds() -> None:
    config = LogConfig.from_properties({"message.timestamp.difference.max.ms": "5000"})
    assert (config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms) == (5000, 5000)
    both = LogConfig.from_properties(
        {"message.timestamp.difference.max.ms": "5000", "message.timestamp.after.max.ms": "10"}
    )
    assert (both.message_timestamp_before_max_ms, both.message_timestamp_after_max_ms) == (5000, 10)
