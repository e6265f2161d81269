"""What a simulated run must show, judged from what the clients were told and what the log holds at the end.

Pure functions of the run's observations (no I/O), one finding per violated promise:

* **lost**: an acknowledged record (acks=all, RF 3, min.insync.replicas=2) is not in the final log at
  the offset its acknowledgement named;
* **moved**: an acknowledged record is in the log, but at another offset;
* **duplicated**: a value appears at more than one offset (an idempotent producer's retry was appended
  twice);
* **reordered**: one producer's records appear out of sequence order;
* **unseen**: a record a consumer read below the high watermark while the faults ran is gone or changed
  (a high watermark that went back and took a consumed record with it);
* **split brain**: two brokers led the same partition at the same leader epoch;
* **offsets back**: a consumer group's committed offset read back below a commit the coordinator had
  acknowledged before (while the faults ran, or after they healed);
* **transactions**: a transaction of the consume-transform-produce loop partly visible to
  read_committed, a committed one invisible, an aborted one visible, or the group offset it committed
  not that of the last visible transaction (`strom.sim.txn_workload`);
* **unavailable**: a partition had no leader, or could not be read, within the bound after every fault
  healed (liveness).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from strom.sim.workload import Acked

__all__ = ["Findings", "check"]


@dataclass
class Findings:
    acked: int = 0
    lost: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)
    split_brain: list[str] = field(default_factory=list)
    offsets_back: list[str] = field(default_factory=list)
    transactions: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)

    KINDS = (
        "lost",
        "moved",
        "duplicated",
        "reordered",
        "unseen",
        "split_brain",
        "offsets_back",
        "transactions",
        "unavailable",
    )

    def counts(self) -> dict[str, int]:
        return {kind: len(getattr(self, kind)) for kind in self.KINDS}

    @property
    def ok(self) -> bool:
        return not any(self.counts().values())

    def summary(self) -> str:
        bad = {k: v for k, v in self.counts().items() if v}
        return f"acked={self.acked} " + (" ".join(f"{k}={v}" for k, v in bad.items()) if bad else "ok")

    def examples(self, limit: int = 5) -> list[str]:
        out: list[str] = []
        for kind in self.KINDS:
            out += [f"{kind}: {x}" for x in getattr(self, kind)[:limit]]
        return out


def _seq(value: bytes) -> int:
    return int(value.rsplit(b"-", 1)[1])


def check(
    acked: Iterable[Acked],
    final: Mapping[int, list[tuple[int, bytes]] | None],
    seen: Mapping[int, Mapping[int, bytes]],
    leaders_by_epoch: Mapping[tuple[int, int], set[int]],
    offsets_back: Iterable[str] = (),
    transactions: Iterable[str] = (),
) -> Findings:
    findings = Findings()
    findings.offsets_back.extend(offsets_back)
    findings.transactions.extend(transactions)
    at: dict[int, dict[int, bytes]] = {}
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, records in sorted(final.items()):
        if records is None:
            findings.unavailable.append(f"partition {partition} could not be read after the faults healed")
            continue
        at[partition] = dict(records)
        last = -1
        for offset, value in records:
            where.setdefault(value, []).append((partition, offset))
            seq = _seq(value)
            if seq < last:
                findings.reordered.append(f"{value!r} at {partition}/{offset} after sequence {last}")
            last = max(last, seq)
    for value in sorted(v for v, places in where.items() if len(places) > 1):
        findings.duplicated.append(f"{value!r} at {where[value]}")
    for record in acked:
        findings.acked += 1
        log = at.get(record.partition)
        if log is None:
            continue  # reported as unavailable
        if log.get(record.offset) == record.value:
            continue
        if record.value in where:
            findings.moved.append(
                f"{record.value!r} acked at {record.offset}, found at {where[record.value]}"
            )
        else:
            findings.lost.append(f"{record.value!r} acked at {record.partition}/{record.offset}")
    for partition, offsets in sorted(seen.items()):
        log = at.get(partition)
        if log is None:
            continue
        for offset, value in sorted(offsets.items()):
            if log.get(offset) != value:
                findings.unseen.append(f"{value!r} read at {partition}/{offset}, now {log.get(offset)!r}")
    for (partition, epoch), leaders in sorted(leaders_by_epoch.items()):
        if len(leaders) > 1:
            findings.split_brain.append(f"partition {partition} epoch {epoch} led by {sorted(leaders)}")
    return findings
