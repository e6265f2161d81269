"""The transaction coordinator in the broker core on a manual clock: timeouts decided by the clock the
test moves, and a commit interrupted between its PrepareCommit and its markers completed on load."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from strom.broker.coordinators.transaction_service import TXN_TOPIC
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch
from strom.transaction.state import TxnState
from tests.inprocess.harness import InProcessBroker, PipelinedClient, eventually, fetch_body, produce_body

CONFIG = {
    "transaction.state.log.num.partitions": "1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
TID = "inproc-txn"


async def begin(client: PipelinedClient, timeout_ms: int) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn t-0 and one transactional batch of two records there."""
    found = await client.request(ApiKey.FIND_COORDINATOR, 1, {"key": TID, "key_type": 1})
    assert found["error_code"] == 0
    init = await client.request(
        ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": TID, "transaction_timeout_ms": timeout_ms}
    )
    assert init["error_code"] == 0
    pid, epoch = int(init["producer_id"]), int(init["producer_epoch"])
    added = await client.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        1,
        {
            "v3_and_below_transactional_id": TID,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
        },
    )
    assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
    records = build_batch(
        [(None, b"x", (), 1), (None, b"y", (), 1)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    body = produce_body("t", 0, records)
    body["transactional_id"] = TID
    produced = await client.request(ApiKey.PRODUCE, 8, body)
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
    return pid, epoch


async def read_committed(client: PipelinedClient) -> dict[str, Any]:
    body = fetch_body([("t", 0, 0, 1 << 20)])
    body["isolation_level"] = 1
    response = await client.request(ApiKey.FETCH, 11, body)
    return dict(response["responses"][0]["partitions"][0])


def test_a_transaction_past_its_timeout_is_aborted_on_the_clock(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        client = await node.client()
        pid, epoch = await begin(client, timeout_ms=10_000)
        part = node.broker.replica_manager.leader_partition("t", 0)
        assert (part.log.last_stable_offset, part.log.high_watermark) == (0, 2)
        for _ in range(9):  # 9 s: not yet expired, whatever the real time
            await node.advance(1_000)
        assert node.broker.transactions.coordinator.txns[TID].state is TxnState.ONGOING
        assert part.log.last_stable_offset == 0
        for _ in range(3):
            await node.advance(1_000)
        await eventually(lambda: part.log.last_stable_offset == 3, "the abort marker")
        meta = node.broker.transactions.coordinator.txns[TID]
        await eventually(lambda: meta.state is TxnState.COMPLETE_ABORT, "CompleteAbort")
        assert meta.producer_epoch == epoch + 1  # the zombie is fenced
        fetched = await read_committed(client)
        assert fetched["last_stable_offset"] == 3
        assert fetched["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
        end = {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch, "committed": True}
        assert (await client.request(ApiKey.END_TXN, 1, end))[
            "error_code"
        ] == ErrorCode.INVALID_PRODUCER_EPOCH
        await client.close()

    async def main() -> None:
        async with InProcessBroker(tmp_path, **CONFIG) as node:
            await scenario(node)

    asyncio.run(main())


def test_a_prepared_commit_completes_when_the_coordinator_loads(tmp_path: Path) -> None:
    """The crash point between a durable PrepareCommit and its markers: the next load of
    ``__transaction_state`` writes the COMMIT markers and CompleteCommit."""

    async def crash_after_prepare(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 1, 1, {})
        client = await node.client()
        pid, epoch = await begin(client, timeout_ms=60_000)
        service = node.broker.transactions
        decision = service.coordinator.end_txn(TID, pid, epoch, True, node.clock.time_ms())
        assert decision.transition is not None
        # What EndTxn makes durable first, without the marker writing that follows it.
        assert await service.make_durable(decision.transition) is ErrorCode.NONE
        assert service.coordinator.txns[TID].state is TxnState.PREPARE_COMMIT
        assert node.broker.replica_manager.leader_partition("t", 0).log.last_stable_offset == 0
        await client.close()

    async def reload(node: InProcessBroker) -> None:
        service = node.broker.transactions
        assert (TXN_TOPIC, 0) in node.broker.replica_manager.partitions
        await eventually(
            lambda: (
                TID in service.coordinator.txns
                and service.coordinator.txns[TID].state is TxnState.COMPLETE_COMMIT
            ),
            "CompleteCommit after the load",
        )
        part = node.broker.replica_manager.leader_partition("t", 0)
        assert (part.log.last_stable_offset, part.log.high_watermark) == (3, 3)
        client = await node.client()
        fetched = await read_committed(client)
        assert fetched["aborted_transactions"] == []
        await client.close()

    async def main() -> None:
        async with InProcessBroker(tmp_path, **CONFIG) as node:
            await crash_after_prepare(node)  # no marker writer was started: the state a crash leaves
        async with InProcessBroker(tmp_path, **CONFIG) as node:
            await reload(node)

    asyncio.run(main())
