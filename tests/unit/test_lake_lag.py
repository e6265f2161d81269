"""`PartitionLag`: records not in the table counted against the last stable offset as it is now (also
while a round runs), and the oldest waiting record's wait dated from the first observation past the
table's position."""

from __future__ import annotations

from strom.broker.lake.lag import MAX_SAMPLES, PartitionLag


class Log:
    """A partition's last stable offset, moved by the test."""

    def __init__(self) -> None:
        self.lso = 0

    def last_stable_offset(self) -> int:
        return self.lso


def test_records_count_what_arrives_while_a_round_runs() -> None:
    log = Log()
    lag = PartitionLag(log.last_stable_offset)
    log.lso = 10
    assert lag.records == 0  # the table's position is not known yet
    lag.committed(0, now_ms=1_000)
    assert lag.records == 10
    log.lso = 25  # produced while the round of offsets 0-9 is in flight: nothing committed yet
    assert lag.records == 25
    lag.committed(10, now_ms=3_000)
    assert lag.records == 15
    lag.committed(25, now_ms=4_000)
    assert (lag.records, lag.seconds(5_000)) == (0, 0.0)


def test_seconds_date_the_oldest_record_not_in_the_table() -> None:
    log = Log()
    lag = PartitionLag(log.last_stable_offset)
    lag.committed(0, now_ms=0)
    assert lag.seconds(1_000) == 0.0  # nothing waits
    log.lso = 10
    lag.observe(2_000)  # the translator's periodic look sees offsets 0-9 waiting
    log.lso = 20
    lag.observe(5_000)
    assert lag.seconds(6_000) == 4.0  # offset 0 was first seen waiting at 2 s
    lag.committed(10, now_ms=7_000)
    assert lag.seconds(8_000) == 3.0  # offset 10 was first seen waiting at 5 s, during the round
    lag.committed(20, now_ms=9_000)
    assert lag.seconds(10_000) == 0.0
    log.lso = 21
    assert lag.seconds(11_000) == 0.0  # first seen now: it has not waited yet
    assert lag.seconds(12_500) == 1.5


def test_observations_stay_bounded_and_keep_the_oldest() -> None:
    log = Log()
    lag = PartitionLag(log.last_stable_offset)
    lag.committed(0, now_ms=0)
    for i in range(1, 10 * MAX_SAMPLES):
        log.lso = i
        lag.observe(i)
    assert len(lag._samples) <= MAX_SAMPLES
    assert lag.seconds(100_000) == (100_000 - 1) / 1000
