"""A control-plane call that reaches ZooKeeper, as its client sees a failure of ZooKeeper.

A metadata-store error (ZooKeeper unreachable, a session lost mid-call) is answered to the client as
REQUEST_TIMED_OUT, which Kafka's clients retry, rather than closing its connection: `needs_zookeeper`
wraps the cluster member's store-backed methods, whether they run on the event loop or in a worker
thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from strom.cluster.metadata_store import MetadataStoreError
from strom.protocol.errors import ErrorCode, KafkaError

_P = ParamSpec("_P")
_R = TypeVar("_R")


def needs_zookeeper(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """ZooKeeper unreachable -> REQUEST_TIMED_OUT (retriable) for the client, not a closed connection."""

    @functools.wraps(method)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except MetadataStoreError as exc:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper unavailable: {exc}") from exc

    return wrapper
