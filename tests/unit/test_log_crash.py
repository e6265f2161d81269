"""kill -9 durability: every append acknowledged before SIGKILL is present exactly once, in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from test_storage_support import make_batch

from strom.protocol.records.batch import iter_headers
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {helpers!r})
    from test_storage_support import make_batch
    from strom.storage.config import LogConfig
    from strom.storage.log_manager import LogManager

    manager = LogManager([{log_dir!r}], LogConfig(segment_bytes=20_000, index_interval_bytes=500))
    log = manager.get_or_create_log("crash", 0)
    i = 0
    while True:
        info = log.append_as_leader(make_batch(count=1 + i % 4, value_size=40, timestamp=i), leader_epoch=0)
        log.high_watermark = log.log_end_offset
        print(i, info.base_offset, info.last_offset, flush=True)
        if i % 100 == 0:
            manager.checkpoint_all()
        i += 1
    """
)


def test_sigkill_loses_no_acknowledged_append(tmp_path: Path) -> None:
    log_dir = str(tmp_path / "logs")
    script = CHILD.format(helpers=str(Path(__file__).parent), log_dir=log_dir)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acked: list[tuple[int, int, int]] = []
    assert child.stdout is not None
    try:
        for line in child.stdout:
            fields = line.split()
            if len(fields) == 3:  # a line cut by the kill was not necessarily acknowledged
                acked.append((int(fields[0]), int(fields[1]), int(fields[2])))
            if len(acked) >= 1500:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    # Lines the child printed after we stopped reading were acknowledged too.
    tail = [line.split() for line in child.stdout.read().split("\n")[:-1]]  # the last piece may be cut
    acked += [(int(a), int(b), int(c)) for a, b, c in (t for t in tail if len(t) == 3)]
    assert acked

    manager = LogManager([log_dir], LogConfig(segment_bytes=20_000, index_interval_bytes=500))
    log = manager.get_or_create_log("crash", 0)
    stored = [(h.base_timestamp, h.base_offset, h.last_offset) for _, h in iter_headers(log.read(0, 1 << 30))]
    assert [ts for ts, _, _ in stored] == list(range(len(stored)))  # each append once, in order
    assert len(stored) >= len(acked)
    assert stored[: len(acked)] == acked
    assert log.append_as_leader(make_batch(), 0).base_offset == stored[-1][2] + 1
