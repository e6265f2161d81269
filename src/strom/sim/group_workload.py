"""A consumer group committing offsets while the faults run: committed offsets must never move back.

`OffsetCommitter` is a consumer of a group with no members (generation -1, as a consumer that assigns
itself its partitions commits), the way the group coordinator's offset store is reached by every
committing client: FindCoordinator for the group, then OffsetCommit of ever larger offsets for every
partition of the workload's topic, each followed by an OffsetFetch of them. A coordinator that moved
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a closed connection) is found again; one still loading
its partition of ``__consumer_offsets`` (COORDINATOR_LOAD_IN_PROGRESS) is asked again later.

What it records for the checker: every commit the coordinator acknowledged, in order, and every
fetch that answered an offset below one acknowledged before the fetch was sent (the offset store lost
or undid an acknowledged commit: **offsets back**). After the faults heal, `final_check` fetches once
more: every partition must answer at least its last acknowledged commit and at most the last offset
ever sent (an unacknowledged commit may have landed or not, as a timed-out request may).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from strom.sim.workload import TOPIC, Topology

__all__ = ["GROUP", "OffsetCommitter"]

GROUP = "sim-group"

_FIND_AGAIN = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}


@dataclass
class OffsetCommitter:
    topology: Topology
    partitions: int
    interval_s: float = 2.0
    acked: dict[int, int] = field(default_factory=dict)  # partition -> last acknowledged commit
    sent: dict[int, int] = field(default_factory=dict)  # partition -> highest offset ever sent
    commits: int = 0  # acknowledged commits (partition offsets)
    went_back: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    _coordinator: tuple[str, int] | None = None

    async def run(self, until_s: float) -> None:
        loop = asyncio.get_running_loop()
        offset = 0
        while loop.time() < until_s:
            offset += 1
            await self._commit(offset)
            floor = dict(self.acked)
            fetched = await self._fetch()
            for partition, value in sorted((fetched or {}).items()):
                if value < floor.get(partition, -1):
                    self.went_back.append(
                        f"partition {partition}: fetched {value} after commit {floor[partition]} was acked"
                    )
            await asyncio.sleep(self.interval_s)

    async def final_check(self, until_s: float) -> list[str]:
        """After the faults healed: each partition's committed offset is its last acknowledged commit,
        or a later one that was sent; the violations (none when the store kept its promise)."""
        loop = asyncio.get_running_loop()
        while loop.time() < until_s:
            fetched = await self._fetch()
            if fetched is None:
                await asyncio.sleep(0.5)
                continue
            out = []
            for partition, last in sorted(self.acked.items()):
                value = fetched.get(partition, -1)
                if not last <= value <= self.sent[partition]:
                    out.append(f"partition {partition}: committed {value} after the faults, acked {last}")
            return out
        return [f"group {GROUP}: no coordinator answered OffsetFetch after the faults healed"]

    async def _find(self) -> tuple[str, int] | None:
        if self._coordinator is not None:
            return self._coordinator
        await self.topology.refresh()
        for address in sorted(self.topology.brokers.values()):
            try:
                answer = await self.topology.connection(address).send(
                    ApiKey.FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0}, 2000
                )
            except ConnectionError:
                continue
            if answer.get("error_code", 0) == 0:
                self._coordinator = (answer["host"], answer["port"])
                return self._coordinator
            self._count(ErrorCode(answer["error_code"]).name)
        return None

    async def _commit(self, offset: int) -> None:
        address = await self._find()
        if address is None:
            return
        for p in range(self.partitions):
            self.sent[p] = offset
        body: OffsetCommitRequest = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": p, "committed_offset": offset, "committed_metadata": None}
                        for p in range(self.partitions)
                    ],
                }
            ],
        }
        try:
            answer = await self.topology.connection(address).send(ApiKey.OFFSET_COMMIT, 7, body, 5000)
        except ConnectionError:
            self._count("connection")
            self._coordinator = None
            return
        for result in answer["topics"][0]["partitions"]:
            code = result["error_code"]
            if code == 0:
                self.acked[result["partition_index"]] = offset
                self.commits += 1
                continue
            self._count(ErrorCode(code).name)
            if code in _FIND_AGAIN:
                self._coordinator = None

    async def _fetch(self) -> dict[int, int] | None:
        address = await self._find()
        if address is None:
            return None
        body: OffsetFetchRequest = {
            "group_id": GROUP,
            "topics": [{"name": TOPIC, "partition_indexes": list(range(self.partitions))}],
        }
        try:
            answer = await self.topology.connection(address).send(ApiKey.OFFSET_FETCH, 7, body, 5000)
        except ConnectionError:
            self._coordinator = None
            return None
        code = answer.get("error_code", 0)
        if code:
            self._count(ErrorCode(code).name)
            if code in _FIND_AGAIN:
                self._coordinator = None
            return None
        out = {}
        for topic in answer["topics"]:
            for result in topic["partitions"]:
                if result["error_code"] == 0:
                    out[result["partition_index"]] = result["committed_offset"]
        return out

    def _count(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1
