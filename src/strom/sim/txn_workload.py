"""A transactional consume-transform-produce loop, and what read_committed must show of it.

`TransactionalCopier` plays Kafka Streams' exactly-once loop with one transactional id. It starts
while the faults already run, by creating its output topic ``txn-out`` (one partition, RF 3,
min.insync.replicas=2), and half-way through it grows the topic to two partitions
(CreatePartitions) and writes to the new one too. Per transaction *n* it adds every partition of
``txn-out`` it knows to the transaction, produces two records to each (``t<n>-<i>``), adds the
consumer group ``sim-txn-group`` to it and commits, inside it, the group's offset *n* for the input
partition it "consumed" (``events``/0), then ends it: commit, or abort for a share of them drawn
from the seed. The transaction coordinator, the group coordinator,
the partition leaders and the markers all move under the faults.

Any step that fails abandons the transaction: the copier fences itself with InitProducerId (a new
epoch; the coordinator aborts what was open), as a client does after an abortable error, and goes
on with the next one. So each transaction ends in one of three fates the copier knows:
**committed** (EndTxn(commit) acknowledged: all of it must be visible), **aborted** (aborted, or
abandoned before EndTxn(commit) was sent: none of it may be visible), or **in doubt** (EndTxn(commit)
sent, no answer: all or nothing).

`check_transactions` judges a read_committed read of ``txn-out`` after the faults healed against
those fates, and the group's committed offset against it: the offset commit is part of the
transaction, so the group's offset must be the number of the last visible transaction.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import CreatePartitionsRequest, OffsetFetchRequest, ProduceRequest
from strom.protocol.records.builder import build_batch
from strom.sim.workload import TOPIC, Topology

__all__ = [
    "GROWN_PARTITIONS",
    "OUT_PARTITIONS",
    "OUT_TOPIC",
    "TXN_GROUP",
    "TransactionalCopier",
    "check_transactions",
    "committed_offset",
]

OUT_TOPIC = "txn-out"
OUT_PARTITIONS = 1
GROWN_PARTITIONS = 2
RECORDS_PER_PARTITION = 2
TXN_ID = "sim-txn"
TXN_GROUP = "sim-txn-group"
TXN_TIMEOUT_MS = 10_000  # an abandoned transaction the copier cannot fence ends this long after


class _Abandon(Exception):
    """A step failed: the transaction cannot go on."""


@dataclass
class TransactionalCopier:
    topology: Topology  # of OUT_TOPIC
    rng: random.Random
    abort_share: float = 0.25
    interval_s: float = 1.0
    fates: dict[int, str] = field(default_factory=dict)  # transaction -> committed/aborted/in doubt
    widths: dict[int, int] = field(default_factory=dict)  # transaction -> partitions it wrote
    partitions: int = OUT_PARTITIONS
    created: bool = False
    errors: dict[str, int] = field(default_factory=dict)
    producer_id: int = -1
    producer_epoch: int = -1
    _sequences: dict[int, int] = field(default_factory=dict)
    _coordinators: dict[int, tuple[str, int]] = field(default_factory=dict)  # key type -> address

    async def run(self, start_s: float, grow_s: float, until_s: float) -> None:
        """Create the topic at ``start_s``, grow it at ``grow_s``, run transactions until ``until_s``."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, start_s - loop.time()))
        if not await self.topology.create_topic(OUT_PARTITIONS, 3, 2, until_s):
            return
        self.created = True
        number = 0
        while loop.time() < until_s:
            if self.partitions < GROWN_PARTITIONS and loop.time() >= grow_s:
                await self._grow()
            if self.producer_id < 0 and not await self._init(until_s):
                return
            number += 1
            self.widths[number] = self.partitions
            commit = self.rng.random() >= self.abort_share
            try:
                await self._transaction(number)
            except _Abandon as exc:
                self._count(str(exc))
                self.fates[number] = "aborted"
                self.producer_id = -1  # fence the open transaction: InitProducerId aborts it
                continue
            self.fates[number] = await self._end(commit)
            if self.fates[number] == "in doubt":
                self.producer_id = -1
            await asyncio.sleep(self.interval_s)

    # steps -------------------------------------------------------------------------------------------------
    async def _grow(self) -> None:
        body: CreatePartitionsRequest = {
            "topics": [{"name": OUT_TOPIC, "count": GROWN_PARTITIONS, "assignments": None}],
            "timeout_ms": 5000,
            "validate_only": False,
        }
        await self.topology.refresh()
        for address in sorted(self.topology.brokers.values()):
            try:
                answer = await self.topology.connection(address).send(ApiKey.CREATE_PARTITIONS, 3, body, 8000)
            except ConnectionError:
                continue
            code = answer["results"][0]["error_code"]
            if code in (0, ErrorCode.INVALID_PARTITIONS):  # grown now, or by an earlier try
                self.partitions = GROWN_PARTITIONS
                return
            self._count(ErrorCode(code).name)

    async def _init(self, until_s: float) -> bool:
        loop = asyncio.get_running_loop()
        while loop.time() < until_s:
            body = {"transactional_id": TXN_ID, "transaction_timeout_ms": TXN_TIMEOUT_MS}
            try:
                answer = await self._ask(1, TXN_ID, ApiKey.INIT_PRODUCER_ID, 1, body)
            except _Abandon as exc:
                self._count(str(exc))
                await asyncio.sleep(0.2)
                continue
            if answer["error_code"] == 0:
                self.producer_id, self.producer_epoch = answer["producer_id"], answer["producer_epoch"]
                self._sequences.clear()
                return True
            self._failed(1, answer["error_code"])
            await asyncio.sleep(0.2)
        return False

    async def _transaction(self, number: int) -> None:
        ids = {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch}
        body: dict[str, Any] = {
            "v3_and_below_transactional_id": TXN_ID,
            "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [{"name": OUT_TOPIC, "partitions": list(range(self.partitions))}],
        }
        answer = await self._ask(1, TXN_ID, ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)
        for topic in answer["results_by_topic_v3_and_below"]:
            for result in topic["results_by_partition"]:
                self._check(1, result["partition_error_code"])
        for partition in range(self.partitions):
            await self._produce(number, partition)
        body = {"transactional_id": TXN_ID, **ids, "group_id": TXN_GROUP}
        self._check(1, (await self._ask(1, TXN_ID, ApiKey.ADD_OFFSETS_TO_TXN, 3, body))["error_code"])
        body = {
            "transactional_id": TXN_ID,
            "group_id": TXN_GROUP,
            **ids,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": number, "committed_metadata": None}
                    ],
                }
            ],
        }
        answer = await self._ask(0, TXN_GROUP, ApiKey.TXN_OFFSET_COMMIT, 3, body)
        for topic in answer["topics"]:
            for result in topic["partitions"]:
                self._check(0, result["error_code"])

    async def _produce(self, number: int, partition: int) -> None:
        await self.topology.refresh()
        address = self.topology.leader_address(partition)
        if address is None:
            raise _Abandon("no leader")
        seq = self._sequences.get(partition, 0)
        batch = build_batch(
            [(None, b"t%d-%d" % (number, partition * RECORDS_PER_PARTITION + i), [], 0) for i in range(2)],
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        body: ProduceRequest = {
            "transactional_id": TXN_ID,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": OUT_TOPIC, "partition_data": [{"index": partition, "records": batch}]}],
        }
        try:
            answer = await self.topology.connection(address).send(ApiKey.PRODUCE, 8, body, 8000)
        except ConnectionError as exc:
            raise _Abandon("connection") from exc
        code = answer["responses"][0]["partition_responses"][0]["error_code"]
        if code:
            raise _Abandon(ErrorCode(code).name)
        self._sequences[partition] = seq + RECORDS_PER_PARTITION

    async def _end(self, commit: bool) -> str:
        body = {
            "transactional_id": TXN_ID,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "committed": commit,
        }
        try:
            answer = await self._ask(1, TXN_ID, ApiKey.END_TXN, 3, body)
            self._check(1, answer["error_code"])
        except _Abandon as exc:
            self._count(str(exc))
            return "in doubt" if commit else "aborted"
        return "committed" if commit else "aborted"

    # coordinators ------------------------------------------------------------------------------------------
    async def _ask(self, key_type: int, key: str, api: int, version: int, body: Mapping[str, Any]) -> Any:
        address = await self._find(key_type, key)
        try:
            return await self.topology.connection(address).request(api, version, body, 5000)
        except ConnectionError as exc:
            self._coordinators.pop(key_type, None)
            raise _Abandon("connection") from exc

    async def _find(self, key_type: int, key: str) -> tuple[str, int]:
        known = self._coordinators.get(key_type)
        if known is not None:
            return known
        await self.topology.refresh()
        for address in sorted(self.topology.brokers.values()):
            try:
                answer = await self.topology.connection(address).send(
                    ApiKey.FIND_COORDINATOR, 3, {"key": key, "key_type": key_type}, 2000
                )
            except ConnectionError:
                continue
            if answer.get("error_code", 0) == 0:
                self._coordinators[key_type] = (answer["host"], answer["port"])
                return self._coordinators[key_type]
        raise _Abandon("no coordinator")

    def _check(self, key_type: int, code: int) -> None:
        if code:
            self._failed(key_type, code)
            raise _Abandon(ErrorCode(code).name)

    def _failed(self, key_type: int, code: int) -> None:
        if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self._coordinators.pop(key_type, None)
        self._count(ErrorCode(code).name)

    def _count(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def committed_offset(topology: Topology, until_s: float) -> int | None:
    """The transactional group's committed offset for the input partition (-1: none), once its
    coordinator answers with no commit pending; None if none did before ``until_s``."""
    loop = asyncio.get_running_loop()
    body: OffsetFetchRequest = {
        "group_id": TXN_GROUP,
        "topics": [{"name": TOPIC, "partition_indexes": [0]}],
        "require_stable": True,
    }
    while loop.time() < until_s:
        await topology.refresh()
        for address in sorted(topology.brokers.values()):
            try:
                found = await topology.connection(address).send(
                    ApiKey.FIND_COORDINATOR, 3, {"key": TXN_GROUP, "key_type": 0}, 2000
                )
                if found.get("error_code", 0):
                    continue
                answer = await topology.connection((found["host"], found["port"])).send(
                    ApiKey.OFFSET_FETCH, 7, body, 5000
                )
            except ConnectionError:
                continue
            results = [p for t in answer["topics"] for p in t["partitions"]]
            if answer.get("error_code", 0) == 0 and results and results[0]["error_code"] == 0:
                return int(results[0]["committed_offset"])
        await asyncio.sleep(0.5)
    return None


def check_transactions(
    fates: Mapping[int, str],
    widths: Mapping[int, int],
    visible: Mapping[int, list[tuple[int, bytes]] | None],
    offset: int | None,
) -> list[str]:
    """The transactional anomalies of a run (module docstring); empty when every promise held."""
    out: list[str] = []
    count: dict[int, int] = {}
    for partition, records in sorted(visible.items()):
        if records is None:
            out.append(f"{OUT_TOPIC}/{partition} could not be read with read_committed after the faults")
            continue
        for _, value in records:
            number = int(value[1:].split(b"-", 1)[0])
            count[number] = count.get(number, 0) + 1
    for number in sorted(set(fates) | set(count)):
        fate, seen = fates.get(number, "never begun"), count.get(number, 0)
        whole = widths.get(number, OUT_PARTITIONS) * RECORDS_PER_PARTITION
        if seen not in (0, whole):
            out.append(f"transaction {number} ({fate}): {seen} of its {whole} records visible")
        elif fate == "committed" and seen == 0:
            out.append(f"transaction {number}: committed, none of its records visible")
        elif fate in ("aborted", "never begun") and seen:
            out.append(f"transaction {number}: {fate}, yet its records are visible")
    last = max((n for n, seen in count.items() if seen), default=-1)
    if offset is None:
        out.append(f"group {TXN_GROUP}: its committed offset could not be read after the faults")
    elif offset != last:
        out.append(
            f"group {TXN_GROUP}: committed offset {offset}, but the last visible transaction is {last}"
        )
    return out
