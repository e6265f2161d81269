"""Base exceptions shared by every layer (no Kafka error codes here: those live in strom.protocol)."""

from __future__ import annotations


class StromError(Exception):
    """Base of Strom's own exceptions; anything else escaping a component is a bug."""


class ConfigError(StromError):
    """A configuration value or file that cannot be used; the message is one line for the user."""
