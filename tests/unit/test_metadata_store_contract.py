"""The metadata-store contract (tests/metadata_store_contract.py) against the local store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.metadata_store_contract import *  # noqa: F403  (the contract's tests, run here)
from tests.metadata_store_contract import Backend, LocalBackend


@pytest.fixture
def backend() -> Iterator[Backend]:
    local = LocalBackend()
    yield local
    local.store.close()
