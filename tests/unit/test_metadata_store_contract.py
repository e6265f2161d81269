"""The metadata-store contract (tests/metadata_store_contract.py) against the local store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.metadata_store_contract import (
    Backend,
    LocalBackend,
    test_an_epoch_check_fences_a_deposed_writer,
    test_an_expired_session_loses_its_ephemerals_and_comes_back_new,
    test_bulk_reads_and_writes,
    test_children_watch_fires_on_a_child_created_or_deleted,
    test_creation_ids_grow,
    test_ephemerals_end_with_their_session_and_fire_watches,
    test_make_parents_ensure_path_and_recursive_delete,
    test_multi_applies_all_or_nothing,
    test_sequential_names_count_up_per_parent,
    test_versions_and_conditional_writes,
    test_watches_are_one_shot_run_after_the_write_and_re_arm,
)

__all__ = [
    "test_an_epoch_check_fences_a_deposed_writer",
    "test_an_expired_session_loses_its_ephemerals_and_comes_back_new",
    "test_bulk_reads_and_writes",
    "test_children_watch_fires_on_a_child_created_or_deleted",
    "test_creation_ids_grow",
    "test_ephemerals_end_with_their_session_and_fire_watches",
    "test_make_parents_ensure_path_and_recursive_delete",
    "test_multi_applies_all_or_nothing",
    "test_sequential_names_count_up_per_parent",
    "test_versions_and_conditional_writes",
    "test_watches_are_one_shot_run_after_the_write_and_re_arm",
]


@pytest.fixture
def backend() -> Iterator[Backend]:
    local = LocalBackend()
    yield local
    local.store.close()
