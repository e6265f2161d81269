"""Stateful property test: random append/read/truncate/roll/reopen/delete sequences keep log invariants."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_storage_support import make_batch

from strom.protocol.errors import KafkaError
from strom.protocol.records.batch import iter_headers
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=64, segment_index_bytes=64)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.log = PartitionLog(f"{self.root}/p-0", CONFIG, lambda: 0)
        self.model: list[tuple[int, int, int]] = []  # (base, last, timestamp) of stored batches
        self.sizes: dict[int, int] = {}  # base offset -> batch size
        self.next_fetch = 0
        self.log_start = 0
        self.next_ts = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def leo(self) -> int:
        return self.model[-1][1] + 1 if self.model else self.log.log_end_offset

    @rule(count=st.integers(1, 6))
    def append(self, count: int) -> None:
        expected_base = self.leo
        batch = make_batch(count=count, timestamp=self.next_ts)
        info = self.log.append_as_leader(batch, 0)
        assert info.base_offset == expected_base
        self.model.append((info.base_offset, info.last_offset, self.next_ts))
        self.sizes[info.base_offset] = len(batch)
        self.next_ts += 1
        self.log.high_watermark = self.log.log_end_offset

    @rule(data=st.data(), max_bytes=st.integers(0, 600), min_one=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool) -> None:
        offset = data.draw(st.integers(self.log_start - 1, self.leo + 1))
        if offset < self.log.log_start_offset or offset > self.leo:
            try:
                self.log.read(offset, max_bytes)
            except KafkaError:
                return
            raise AssertionError("expected OFFSET_OUT_OF_RANGE")
        upper = data.draw(st.integers(offset, self.leo + 1))
        if data.draw(st.booleans()) and self.log.log_start_offset <= self.next_fetch <= self.leo:
            offset = self.next_fetch  # where the previous read ended, as a consumer goes on
            upper = max(upper, offset)
        got = [
            (h.base_offset, h.last_offset, h.base_timestamp)
            for _, h in iter_headers(self.log.read(offset, max_bytes, upper, min_one_batch=min_one))
        ]
        if got:
            self.next_fetch = got[-1][1] + 1
        # Whole batches from the one holding `offset`, each ending below `upper`, as many as fit in
        # max_bytes; the first one even if it does not fit when min_one.
        expected: list[tuple[int, int, int]] = []
        total = 0
        for b in self.model:
            if b[1] < offset:
                continue
            if b[1] >= upper or (total + self.sizes[b[0]] > max_bytes and (expected or not min_one)):
                break
            expected.append(b)
            total += self.sizes[b[0]]
        assert got == expected

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log.log_start_offset, self.leo))
        self.log.truncate_to(offset)
        self.model = [b for b in self.model if b[1] < offset]
        if not self.model:
            self.log_start = self.log.log_start_offset

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = PartitionLog(self.log.dir, CONFIG, lambda: 0, log_start_offset=self.log.log_start_offset)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.log.log_start_offset, self.log.high_watermark))
        self.log.delete_records_before(offset)
        self.log_start = self.log.log_start_offset
        self.model = [b for b in self.model if b[1] >= self.log_start]

    @invariant()
    def offsets_consistent(self) -> None:
        log = self.log
        assert log.log_end_offset == self.leo
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert log.segments[0].base_offset <= log.log_start_offset
        for prev, nxt in zip(log.segments, log.segments[1:], strict=False):
            assert prev.next_offset <= nxt.base_offset
            assert prev.size > 0

    @invariant()
    def everything_readable(self) -> None:
        if self.log.log_start_offset >= self.leo:
            return
        data = self.log.read(self.log.log_start_offset, 1 << 20)
        got = [(h.base_offset, h.last_offset, h.base_timestamp) for _, h in iter_headers(data)]
        assert got == self.model


LogMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestLogMachine = LogMachine.TestCase
