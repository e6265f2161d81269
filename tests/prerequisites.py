"""Prerequisites of the suites that drive outside programs (ZooKeeper, kcat, Linux network tools).

Outside CI a missing prerequisite skips the test, naming what is missing, so a developer without
ZooKeeper can still run the rest. Under CI (``CI=true``, which ``.ci/run`` exports) it fails the test: a
broken install or a regression must not turn whole suites into skips while CI stays green.
"""

from __future__ import annotations

import os
import shutil

import pytest

from strom.testing.zookeeper_process import zookeeper_available


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def require(available: bool, what: str) -> None:
    """Skip (outside CI) or fail (under CI) the calling test unless ``available``."""
    if available:
        return
    if under_ci():
        pytest.fail(f"prerequisite missing under CI: {what}", pytrace=False)
    pytest.skip(f"prerequisite missing: {what} (a failure under CI=true)")


def require_zookeeper() -> None:
    require(zookeeper_available(), "ZooKeeper (Debian package zookeeper) and java")


def require_kcat() -> None:
    require(shutil.which("kcat") is not None, "kcat (Debian package kcat)")
