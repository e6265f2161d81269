"""One entry of a DescribeConfigs answer, as the config resources' handlers build them."""

from __future__ import annotations

from strom.protocol.messages import DescribeConfigsResponseResourceResult

__all__ = ["config_entry"]


def config_entry(
    name: str, value: str | None, source: int, is_default: bool
) -> DescribeConfigsResponseResourceResult:
    """A config that is neither read-only nor sensitive, without synonyms or documentation."""
    return {
        "name": name,
        "value": value,
        "read_only": False,
        "config_source": source,
        "is_default": is_default,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": 0,
        "documentation": None,
    }
