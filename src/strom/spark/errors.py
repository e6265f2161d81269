"""The error every option check of the `strom` data source raises (its own module: `options` and
`java_options` both raise it, and `options` calls `java_options`)."""

from __future__ import annotations


class KafkaOptionError(ValueError):
    """An invalid option: the message names the option and says what is expected."""
