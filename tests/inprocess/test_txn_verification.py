"""KIP-890 part 1 in the broker core: a transaction costs one verification per partition, not one per
batch, and a marker voids what was verified (the partition's `VerificationState`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.records.builder import build_batch
from tests.inprocess.harness import InProcessBroker, PipelinedClient, eventually, produce_body

TID = "inproc-verify"


async def produce(client: PipelinedClient, pid: int, epoch: int, partition: int, seq: int) -> int:
    records = build_batch(
        [(None, b"v", (), int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    body = produce_body("t", partition, records)
    body["transactional_id"] = TID
    response = await client.request(ApiKey.PRODUCE, 9, body)
    return int(response["responses"][0]["partition_responses"][0]["error_code"])


async def add(client: PipelinedClient, pid: int, epoch: int, *partitions: int) -> int:
    body = {
        "v3_and_below_transactional_id": TID,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "t", "partitions": list(partitions)}],
    }
    response = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)
    (code,) = {
        p["partition_error_code"]
        for p in response["results_by_topic_v3_and_below"][0]["results_by_partition"]
    }
    return int(code)


async def end(client: PipelinedClient, pid: int, epoch: int) -> int:
    body = {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch, "committed": True}
    return int((await client.request(ApiKey.END_TXN, 3, body))["error_code"])


def test_one_verification_per_partition_and_transaction(tmp_path: Path) -> None:
    async def scenario(node: InProcessBroker) -> None:
        node.broker.topics.create_topic("t", 2, 1, {})
        client = await node.client()
        found = await client.request(ApiKey.FIND_COORDINATOR, 1, {"key": TID, "key_type": 1})
        assert found["error_code"] == 0
        init = await client.request(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": TID, "transaction_timeout_ms": 60_000}
        )
        pid, epoch = int(init["producer_id"]), int(init["producer_epoch"])
        verifier = node.broker.transactions.verifier
        part = node.broker.replica_manager.leader_partition("t", 0)
        verification = part.log.producer_state.verification
        seq = 0
        for txn in range(2):
            assert await add(client, pid, epoch, 0) == ErrorCode.NONE
            before = verifier.questions
            for _ in range(5):
                assert await produce(client, pid, epoch, 0, seq) == ErrorCode.NONE
                seq += 1
            assert verifier.questions == before + 1, f"transaction {txn}: one question for five batches"
            assert verification.verified(pid, epoch)
            assert await produce(client, pid, epoch, 1, 0) == ErrorCode.INVALID_TXN_STATE
            assert (
                len(node.broker.replica_manager.leader_partition("t", 1).log.producer_state.verification) == 0
            )
            assert await end(client, pid, epoch) == ErrorCode.NONE
            await eventually(lambda: not verification.verified(pid, epoch), "the marker voids it")
        # a late batch of the ended transaction asks again and is refused
        before = verifier.questions
        assert await produce(client, pid, epoch, 0, seq) == ErrorCode.INVALID_TXN_STATE
        assert verifier.questions == before + 1
        assert part.log.last_stable_offset == part.log.high_watermark == 12  # 10 records, 2 markers
        await client.close()

    async def main() -> None:
        async with InProcessBroker(tmp_path, **{"transaction.state.log.num.partitions": "1"}) as node:
            await scenario(node)

    asyncio.run(main())
