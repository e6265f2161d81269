"""The two errors of Strom's ZooKeeper layer (`strom.cluster.zk` and the modules mixed into it)."""

from __future__ import annotations

__all__ = ["ControllerMovedError", "ZkError"]


class ZkError(Exception):
    """ZooKeeper could not be reached or refused an operation in an unexpected way."""


class ControllerMovedError(Exception):
    """A controller write was fenced: ``/controller_epoch`` moved on; this broker is no longer controller."""
