"""A tiered log's local retention: local.retention.* applies, and no segment leaves the disk before it
is remote; without tiering the topic's retention.* applies as before."""

from __future__ import annotations

from pathlib import Path

from test_storage_support import make_batch

from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.retention import checkpointed_log_start


def tiered_log(tmp_path: Path, **config: object) -> PartitionLog:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, **config), lambda: 10_000)  # type: ignore[arg-type]
    for _ in range(40):
        log.append_as_leader(make_batch(count=4), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    return log


def test_local_retention_waits_for_the_remote_copy(tmp_path: Path) -> None:
    log = tiered_log(tmp_path, remote_storage_enable=True, local_retention_bytes=0)
    log.highest_offset_in_remote_storage = -1  # the broker's remote log manager took it over
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    assert log.apply_retention(10_000) == 0  # nothing is remote yet
    log.highest_offset_in_remote_storage = bases[2] - 1  # the first two segments are remote
    assert log.apply_retention(10_000) == 2
    assert log.log_start_offset == bases[2]
    log.highest_offset_in_remote_storage = bases[2]  # only part of the next segment: it stays
    assert log.apply_retention(10_000) == 0


def test_local_retention_defaults_to_the_total_retention(tmp_path: Path) -> None:
    log = tiered_log(tmp_path, remote_storage_enable=True, retention_bytes=2500)
    log.highest_offset_in_remote_storage = log.log_end_offset - 1
    plain = tiered_log(tmp_path / "plain", retention_bytes=2500)
    assert log.apply_retention(10_000) == plain.apply_retention(10_000) > 0
    assert log.log_start_offset == plain.log_start_offset > 0


def test_without_the_broker_side_the_topic_config_alone_changes_nothing(tmp_path: Path) -> None:
    log = tiered_log(tmp_path, remote_storage_enable=True, local_retention_bytes=0, retention_bytes=2500)
    plain = tiered_log(tmp_path / "plain", retention_bytes=2500)
    assert log.apply_retention(10_000) == plain.apply_retention(10_000) > 0
    assert log.log_start_offset == plain.log_start_offset


def _checkpointed(log: PartitionLog) -> int:
    return checkpointed_log_start(log.config, log.log_start_offset, log.deleted_records_before)


def test_delete_records_below_the_local_start_is_kept_for_the_remote_part(tmp_path: Path) -> None:
    """DeleteRecords inside the remote part moves no local segment; the log-start-offset checkpoint keeps
    the offset (the lower of it and the local start), and a log opened from it has both back."""
    log = tiered_log(tmp_path, remote_storage_enable=True, local_retention_bytes=0)
    bases = [s.base_offset for s in log.segments]
    log.highest_offset_in_remote_storage = bases[2] - 1
    log.apply_retention(10_000)  # the first two segments now only remote
    assert log.delete_records_before(bases[1] + 1) == bases[2]  # the local log start does not move
    assert (log.deleted_records_before, _checkpointed(log)) == (bases[1] + 1, bases[1] + 1)
    log.close()
    reopened = PartitionLog(
        log.dir,
        log.config,
        lambda: 10_000,
        log_start_offset=_checkpointed(log),
        high_watermark=log.high_watermark,
    )
    assert (reopened.log_start_offset, reopened.deleted_records_before) == (bases[2], bases[1] + 1)

    assert reopened.delete_records_before(bases[3] + 1) == bases[3] + 1  # past the local start: both move
    assert _checkpointed(reopened) == bases[3] + 1
    plain = tiered_log(tmp_path / "plain")
    plain.delete_records_before(7)
    assert _checkpointed(plain) == plain.log_start_offset == 7  # without tiering: the log start
