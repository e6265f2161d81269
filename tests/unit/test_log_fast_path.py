"""The leader append's one-batch fast path (a request frame's writable memoryview, a topic storing
batches as sent) answers and writes exactly what the general path does for the same payloads.

Each sequence of payloads is appended to two logs: once as a writable ``memoryview`` (the fast path,
as the broker's server hands over records) and once as ``bytes`` (copied, the general path). Every
answer, error code and the stored bytes must match.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_support import idempotent_batch, make_batch

from strom.protocol.errors import KafkaError
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog


def clock() -> int:
    return 1_000_000


def payload(kind: str, seq: int, corrupt: bool) -> bytes:
    if kind == "plain":
        data = bytearray(make_batch(count=3))
    elif kind == "idempotent":
        data = bytearray(idempotent_batch(7, 0, seq, count=2))
    else:  # two batches in one payload: the general path on both sides
        data = bytearray(make_batch(count=1) + make_batch(count=2))
    if corrupt:
        data[-1] ^= 0xFF  # a CRC mismatch
    return bytes(data)


def outcomes(log: PartitionLog, payloads: list[bytes], as_view: bool) -> list[object]:
    out: list[object] = []
    for data in payloads:
        records = memoryview(bytearray(data)) if as_view else data
        try:
            out.append(log.append_as_leader(records, leader_epoch=3))
        except KafkaError as exc:
            out.append(exc.code)
    return out


steps = st.lists(
    st.tuples(st.sampled_from(["plain", "idempotent", "several"]), st.integers(0, 4), st.booleans()),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps)
def test_fast_and_general_paths_agree(tmp_path: Path, plan: list[tuple[str, int, bool]]) -> None:
    payloads = [payload(kind, seq, corrupt) for kind, seq, corrupt in plan]
    logs = []
    for name in ("fast", "general"):
        directory = tmp_path / name / "t-0"
        if directory.parent.exists():  # hypothesis reuses tmp_path across examples
            for old in sorted(directory.parent.rglob("*"), reverse=True):
                old.unlink() if old.is_file() else old.rmdir()
        logs.append(PartitionLog(str(directory), LogConfig(), clock))
    fast, general = logs
    assert outcomes(fast, payloads, as_view=True) == outcomes(general, payloads, as_view=False)
    assert fast.log_end_offset == general.log_end_offset
    fast.close()
    general.close()
    stored = [[p.read_bytes() for p in sorted(Path(log.dir).glob("*.log"))] for log in logs]
    assert stored[0] == stored[1]
