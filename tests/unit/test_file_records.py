"""FileRecords: fetch reads as file slices, and the lifetime of the descriptors they hold."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
from test_storage_support import make_batch

from strom.protocol.records.batch import iter_headers
from strom.storage.config import LogConfig
from strom.storage.file_records import FileRecords, TruncatedFileError
from strom.storage.log import PartitionLog


def _log(path: Path, **config: object) -> PartitionLog:
    return PartitionLog(str(path / "t-0"), LogConfig(**config), lambda: 1_000_000)  # type: ignore[arg-type]


def _fill(log: PartitionLog, batches: int, count: int = 4) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(count=count, value_size=50), leader_epoch=0)
    log.high_watermark = log.log_end_offset


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_read_is_slices_of_the_segment_files(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=2000)
    _fill(log, 40)
    records = log.read_records(0, 1 << 20)
    assert isinstance(records, FileRecords)
    assert len(records.slices) == len(log.segments) > 3  # one slice per segment, no bytes read
    assert [s.position for s in records.slices] == [0] * len(log.segments)
    assert records.read_bytes() == b"".join(s.read_bytes(0, s.size) for s in log.segments)
    assert len(records) == sum(s.size for s in log.segments)
    log.close()


def test_slices_end_on_batch_boundaries(tmp_path: Path) -> None:
    log = _log(tmp_path, index_interval_bytes=100)
    _fill(log, 50)
    batch_size = log.segments[0].find_batch(4)[0]  # type: ignore[index]  # the second batch's position
    for max_bytes in (batch_size - 1, batch_size, 7 * batch_size + 5, 20 * batch_size):
        data = log.read_records(0, max_bytes).read_bytes()
        assert sum(h.size for _, h in iter_headers(data)) == len(data)
        assert len(data) == max(max_bytes // batch_size, 1) * batch_size
    log.close()


def test_a_slice_outlives_the_deletion_of_its_segment(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=2000)
    _fill(log, 40)
    first = log.segments[0]
    records = log.read_records(0, first.size)
    expected = first.read_bytes(0, first.size)
    fd = records.slices[0].file.fd
    log.delete_records_before(first.next_offset)  # retention by log start offset deletes the segment
    assert log.segments[0] is not first and not os.path.exists(first.log_path)
    assert _open(fd) and records.read_bytes() == expected  # still readable through the slice
    del records
    gc.collect()
    assert not _open(fd)  # the last holder is gone: the descriptor is closed
    log.close()


def test_closing_the_log_keeps_a_queued_slice_readable(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 5)
    records = log.read_records(0, 1 << 20)
    expected = records.read_bytes()
    log.close()
    assert records.read_bytes() == expected


def test_a_truncated_file_is_reported(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _fill(log, 10)
    records = log.read_records(0, 1 << 20)
    log.truncate_to(8)  # a follower cutting its log after a leader change
    with pytest.raises(TruncatedFileError):
        records.read_bytes()
    log.close()
