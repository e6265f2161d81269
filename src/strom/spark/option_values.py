"""Values of the `strom` data source's options, as Spark writes them: booleans, counts, durations (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from strom.spark.errors import KafkaOptionError


def option_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise KafkaOptionError(f"Invalid value '{value}' for option '{key}', must be true or false")


def option_positive(opts: Mapping[str, str], key: str) -> int | None:
    value = opts.get(key)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise KafkaOptionError(f"Invalid value '{value}' for option '{key}', must be a positive integer")
    return number


def option_non_negative(opts: Mapping[str, str], key: str, default: int) -> int:
    value = opts.get(key)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if number < 0:
        raise KafkaOptionError(f"Invalid value '{value}' for option '{key}', must be a non-negative integer")
    return number


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def option_duration_ms(opts: Mapping[str, str], key: str, default: int) -> int:
    """Spark time strings such as `15m`, `30s`, `500ms`; a bare number is milliseconds."""
    value = opts.get(key)
    if value is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if match is None or match.group(2) not in ("", *_DURATION_UNITS_MS):
        raise KafkaOptionError(f"Invalid value '{value}' for option '{key}', expected a duration like 15m")
    return int(match.group(1)) * _DURATION_UNITS_MS.get(match.group(2), 1)
