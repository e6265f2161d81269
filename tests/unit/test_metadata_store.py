"""The single node's topic catalogue: strom-topics.json plus a journal of changes (metadata_store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker import metadata_store
from strom.broker.metadata_store import CATALOGUE, JOURNAL, LocalMetadataStore


def _state(store: LocalMetadataStore) -> dict[str, tuple[int, dict[str, str], bytes]]:
    return {n: (t.partitions, t.configs, t.topic_id) for n, t in store.topics.items()}


def test_changes_survive_a_reopen_and_the_journal_is_compacted_then(tmp_path: Path) -> None:
    store = LocalMetadataStore(str(tmp_path), 0, None)
    for i in range(20):
        store.create_topic(f"t{i}", 3, 1, {})
    store.set_partitions("t1", 5)
    store.set_configs("t2", {"cleanup.policy": "compact"})
    store.delete_topic("t3")
    assert (tmp_path / JOURNAL).stat().st_size > 0
    expected = _state(store)
    assert "t3" not in expected and expected["t1"][0] == 5
    again = LocalMetadataStore(str(tmp_path), 0, None)
    assert _state(again) == expected
    assert (tmp_path / JOURNAL).stat().st_size == 0  # compacted into the catalogue at load
    assert _state(LocalMetadataStore(str(tmp_path), 0, None)) == expected


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    store = LocalMetadataStore(str(tmp_path), 0, None)
    store.create_topic("kept", 1, 1, {})
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b'{"put":"torn","topic":{"topic_id":"00')  # a crash during an append
    assert set(LocalMetadataStore(str(tmp_path), 0, None).topics) == {"kept"}


def test_the_journal_stays_about_as_small_as_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metadata_store, "COMPACT_FROM_BYTES", 2048)
    store = LocalMetadataStore(str(tmp_path), 0, None)
    for i in range(150):
        store.create_topic(f"topic-{i}", 1, 1, {})
    journal, catalogue = (tmp_path / JOURNAL).stat().st_size, (tmp_path / CATALOGUE).stat().st_size
    assert catalogue > 2048 and journal <= catalogue + 512
    assert len(LocalMetadataStore(str(tmp_path), 0, None).topics) == 150
