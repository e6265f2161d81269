"""Kafka's ``Uuid`` (topic ids, KIP-516): 16 raw bytes on the wire, a short text form everywhere else.

On the wire a ``uuid`` field is its 16 bytes (strom.protocol.spec). In text (the topic's znode, the
``partition.metadata`` file of each partition directory, tools' output) Kafka writes the URL-safe
base64 of those bytes without padding: 22 characters. The all-zero id means "no id" (a topic
addressed by name, or created before topic ids), and Kafka never hands out it, the id of its own
metadata topic (1), or an id whose text starts with ``-`` (it would read as a command-line option).

Strom wrote topic ids as 32 hex digits before taking Kafka's form, so ``parse_uuid`` reads both.
"""

from __future__ import annotations

import base64
import binascii
import uuid

__all__ = ["ZERO_UUID", "new_uuid", "parse_uuid", "uuid_text"]

ZERO_UUID = bytes(16)
_RESERVED = frozenset({ZERO_UUID, (1).to_bytes(16, "big")})


def uuid_text(value: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64, no padding."""
    if len(value) != 16:
        raise ValueError(f"a uuid is 16 bytes, not {len(value)}")
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode("ascii")


def parse_uuid(text: str) -> bytes:
    """Kafka's ``Uuid.fromString`` (22 characters), or the 32 hex digits Strom wrote before.

    Raises:
        ValueError: neither form, or not 16 bytes.
    """
    text = text.strip()
    value = b""
    try:
        if len(text) == 32:
            value = bytes.fromhex(text)
        elif len(text) == 22:
            value = base64.b64decode(text + "==", altchars=b"-_", validate=True)
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"not a uuid: {text!r}") from exc
    if len(value) != 16:
        raise ValueError(f"not a uuid: {text!r}")
    return value


def new_uuid() -> bytes:
    """A random id as Kafka's ``Uuid.randomUuid`` makes one: a version 4 uuid, never a reserved one
    and never one whose text starts with ``-``. Drawn through `uuid.uuid4` (the one source of random
    ids a deterministic simulation replaces)."""
    while True:
        value = uuid.uuid4().bytes
        if value not in _RESERVED and not uuid_text(value).startswith("-"):
            return value
