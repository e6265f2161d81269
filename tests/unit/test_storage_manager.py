"""LogManager, checkpoint files, LogConfig and the sparse indexes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_storage_support import make_batch

from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.checkpoint import (
    CorruptCheckpointError,
    EpochEntry,
    LeaderEpochFileCache,
    TopicPartition,
    read_offsets,
    write_offsets,
)
from strom.storage.config import LOG_CONFIG_DEFS, LogConfig
from strom.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from strom.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, parse_partition_dir


def clock() -> int:
    return 1_000_000


def test_manager_create_restart_and_checkpoints(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, LogConfig(segment_bytes=500), clock)
    logs = {p: manager.get_or_create_log("orders", p) for p in range(4)}
    assert {os.path.dirname(lg.dir) for lg in logs.values()} == set(dirs)  # spread over log dirs
    for p, lg in logs.items():
        for _ in range(p + 3):
            lg.append_as_leader(make_batch(count=2), 0)
        lg.high_watermark = lg.log_end_offset - 1
    logs[3].delete_records_before(4)
    assert manager.get_log("orders", 9) is None
    manager.shutdown()
    assert all(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in dirs)
    hw = read_offsets(os.path.join(dirs[0], "replication-offset-checkpoint"))
    assert all(tp.topic == "orders" for tp in hw)

    again = LogManager(dirs, LogConfig(segment_bytes=500), clock)
    assert not any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in dirs)
    assert sorted(again.all_logs()) == [TopicPartition("orders", p) for p in range(4)]
    for p in range(4):
        lg = again.get_log("orders", p)
        assert lg is not None and lg.recovered_segments == 0
        assert lg.log_end_offset == 2 * (p + 3)
        assert lg.high_watermark == lg.log_end_offset - 1
        assert lg.recovery_point == lg.log_end_offset
    reloaded = again.get_log("orders", 3)
    assert reloaded is not None and reloaded.log_start_offset == 4


def test_manager_unclean_restart_recovers(tmp_path: Path) -> None:
    manager = LogManager([str(tmp_path)], LogConfig(segment_bytes=300), clock)
    lg = manager.get_or_create_log("t", 0)
    for _ in range(10):
        lg.append_as_leader(make_batch(count=2), 0)
    manager.checkpoint_all()  # recovery point is the last roll; no shutdown marker
    again = LogManager([str(tmp_path)], LogConfig(segment_bytes=300), clock)
    reopened = again.get_log("t", 0)
    assert reopened is not None and reopened.log_end_offset == 20
    assert 1 <= reopened.recovered_segments < len(reopened.segments) + 1


def test_manager_delete_log_and_config(tmp_path: Path) -> None:
    manager = LogManager([str(tmp_path)], LogConfig(), clock)
    lg = manager.get_or_create_log("gone", 0, LogConfig(retention_ms=5))
    lg.append_as_leader(make_batch(), 0)
    assert lg.config.retention_ms == 5
    manager.update_config("gone", LogConfig(retention_ms=9))
    assert lg.config.retention_ms == 9
    assert manager.delete_log("gone", 0)
    assert not manager.delete_log("gone", 0)
    assert not os.path.exists(lg.dir)
    assert [n for n in os.listdir(tmp_path) if n.startswith("gone")] == []
    with pytest.raises(KafkaError) as err:
        manager.get_or_create_log("bad/name", 0)
    assert err.value.code is ErrorCode.INVALID_TOPIC_EXCEPTION


def test_manager_flush_dirty_and_retention(tmp_path: Path) -> None:
    manager = LogManager(
        [str(tmp_path)], LogConfig(flush_ms=1000, segment_bytes=300, retention_ms=100), clock
    )
    lg = manager.get_or_create_log("t", 0)
    for _ in range(10):
        lg.append_as_leader(make_batch(count=2, timestamp=1), 0)
    lg.high_watermark = lg.log_end_offset
    assert lg.recovery_point < lg.log_end_offset
    assert manager.flush_dirty(lg.last_flush_ms + 10) == 0
    assert manager.flush_dirty(lg.last_flush_ms + 1000) == 1
    assert lg.recovery_point == lg.log_end_offset
    assert manager.run_retention(1_000_000) > 0
    assert lg.log_start_offset == lg.log_end_offset == 20


def test_flush_messages(tmp_path: Path) -> None:
    manager = LogManager([str(tmp_path)], LogConfig(flush_messages=4), clock)
    lg = manager.get_or_create_log("t", 0)
    lg.append_as_leader(make_batch(count=2), 0)
    assert lg.recovery_point == 0
    lg.append_as_leader(make_batch(count=2), 0)
    assert lg.recovery_point == 4


def test_parse_partition_dir() -> None:
    assert parse_partition_dir("my-topic-12") == TopicPartition("my-topic", 12)
    assert parse_partition_dir("topic") is None
    assert parse_partition_dir("t-0.abc-delete") is None


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "cp")
    offsets = {TopicPartition("a", 0): 5, TopicPartition("b.c", 3): 1 << 40}
    write_offsets(path, offsets)
    assert read_offsets(path) == offsets
    assert Path(path).read_text().splitlines()[:2] == ["0", "2"]
    assert read_offsets(str(tmp_path / "missing")) == {}
    assert not os.path.exists(path + ".tmp")
    with open(path, "w") as f:
        f.write("0\n3\na 0 1\n")
    with pytest.raises(CorruptCheckpointError):
        read_offsets(path)


def test_leader_epoch_cache(tmp_path: Path) -> None:
    path = str(tmp_path / "leader-epoch-checkpoint")
    cache = LeaderEpochFileCache(path)
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.assign(1, 0) and cache.assign(3, 10) and not cache.assign(2, 12)
    cache.assign(4, 10)  # an epoch that wrote nothing is replaced
    assert cache.entries == [EpochEntry(1, 0), EpochEntry(4, 10)]
    assert cache.end_offset_for(0, 50) == (0, 0)
    assert cache.end_offset_for(2, 50) == (1, 10)
    assert cache.end_offset_for(4, 50) == (4, 50)
    cache.write()
    assert LeaderEpochFileCache(path).entries == cache.entries
    cache.truncate_from_start(12)
    assert cache.entries == [EpochEntry(4, 12)]
    cache.truncate_from_end(12)
    assert cache.entries == []
    with open(path, "w") as f:
        f.write("garbage")
    assert LeaderEpochFileCache(path).entries == []


def test_config_from_properties_and_back() -> None:
    defaults = LogConfig()
    cfg = LogConfig.from_properties(
        {
            "retention.ms": "1000",
            "cleanup.policy": "delete,compact",
            "unclean.leader.election.enable": "true",
        },
        defaults,
    )
    assert (
        cfg.retention_ms == 1000
        and cfg.cleanup_policy == "compact,delete"
        and cfg.unclean_leader_election_enable
    )
    assert cfg.delete_enabled and cfg.compact_enabled
    assert cfg.overrides_against(defaults) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
    }
    assert LogConfig.from_properties(cfg.to_properties(), defaults) == cfg
    assert {d.name for d in LOG_CONFIG_DEFS} == set(defaults.to_properties())
    assert next(d for d in LOG_CONFIG_DEFS if d.name == "segment.bytes").default == 1 << 30


@pytest.mark.parametrize(
    "props",
    [
        {"no.such.config": "1"},
        {"retention.ms": "soon"},
        {"segment.bytes": "1"},
        {"message.timestamp.type": "Whenever"},
        {"cleanup.policy": "keep"},
        {"min.cleanable.dirty.ratio": "2"},
        {"unclean.leader.election.enable": "yes"},
        {"min.insync.replicas": "0"},
    ],
)
def test_config_rejects(props: dict[str, str]) -> None:
    with pytest.raises(KafkaError) as err:
        LogConfig.from_properties(props, LogConfig())
    assert err.value.code is ErrorCode.INVALID_CONFIG


def test_offset_index(tmp_path: Path) -> None:
    index = OffsetIndex(str(tmp_path / "x.index"), 100, 80)
    assert index.max_entries == 10 and index.lookup(150) == 0
    for i in range(5):
        index.append(100 + 10 * i, 1000 * i)
    index.append(120, 9999)  # not increasing: ignored
    assert [index.lookup(o) for o in (99, 100, 105, 110, 141, 1000)] == [0, 0, 0, 1000, 4000, 4000]
    index.flush()
    assert os.path.getsize(index.path) == 40
    index.truncate_to_position(2000)
    assert index.entries == 2 and os.path.getsize(index.path) == 16
    reloaded = OffsetIndex(index.path, 100, 80)
    reloaded.load()
    assert list(reloaded.keys) == [0, 10]
    reloaded.sanity_check(log_size=5000)
    with pytest.raises(CorruptIndexError):
        reloaded.sanity_check(log_size=500)
    with open(index.path, "ab") as f:
        f.write(b"\x00")
    with pytest.raises(CorruptIndexError):
        reloaded.load()


def test_time_index(tmp_path: Path) -> None:
    index = TimeIndex(str(tmp_path / "x.timeindex"), 50, 1200)
    for ts, off in [(10, 52), (20, 55), (20, 56), (35, 60)]:
        index.append(ts, off)
    assert index.entries == 3
    assert [index.lookup(t) for t in (5, 10, 11, 20, 21, 100)] == [50, 50, 52, 52, 55, 60]
    index.truncate_to_offset(55)
    assert index.last_entry() == (10, 52)
