"""Request handlers, one module per API family; importing this package registers them all."""

from __future__ import annotations

from typing import Any

from strom.broker.handlers import (  # noqa: F401  (imported for their @handles registrations)
    api_versions,
    cluster,
    configs,
    fetch,
    groups,
    list_offsets,
    metadata,
    offsets,
    produce,
    producer_ids,
    topics,
)
from strom.broker.handlers.base import HANDLERS, Body, Handler, RequestContext, handles
from strom.protocol.api import SUPPORTED


def advertised_api_keys() -> list[dict[str, Any]]:
    """ApiVersions entries: only keys with a handler, at the versions the conformance tests cover."""
    return [
        {"api_key": int(key), "min_version": low, "max_version": high}
        for key, (low, high) in sorted(SUPPORTED.items())
        if int(key) in HANDLERS
    ]


__all__ = ["HANDLERS", "Body", "Handler", "RequestContext", "advertised_api_keys", "handles"]
