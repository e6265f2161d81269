"""`Partition`, the leader's and follower's rules, without sockets: a real log in a temporary directory,
the real purgatory and ISR change manager over the single node's ISR store, a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from test_storage_support import make_batch

from strom._util.clock import ManualClock
from strom.broker.replication.isr_proposals import IsrChangeManager
from strom.broker.replication.partition import Partition, PartitionEnv
from strom.broker.replication.purgatory import DelayedProduces, Purgatory
from strom.cluster.election import LeaderAndIsr
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

LAG_MAX_MS = 10_000


class VersionedIsrStore:
    """ISR writes accepted when the caller read the current version (what the partition-state znode's
    conditional write does), with no notification to send: broker 0 is alone with its partition here."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, int], int] = {}

    async def write_isr(self, topic: str, partition: int, state: LeaderAndIsr) -> LeaderAndIsr | None:
        current = self._versions.get((topic, partition), 0)
        if state.zk_version != current:
            return None
        self._versions[(topic, partition)] = current + 1
        return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, current + 1)

    async def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        return None

    async def notify_log_dir_failure(self, broker_id: int, partitions: list[tuple[str, int]]) -> None:
        return None


class Node:
    """Broker 0's side of one partition: what a replica manager would share with it."""

    def __init__(self, tmp_path: Path, replica_selector: str | None = None, **config: object) -> None:
        self.clock = ManualClock()
        self.purgatory = Purgatory(self.clock)
        self.produces = DelayedProduces(self.clock)
        self.isr_changes = IsrChangeManager(VersionedIsrStore())
        env = PartitionEnv(0, self.clock, self.purgatory, self.produces, self.isr_changes, replica_selector)
        plog = PartitionLog(str(tmp_path / "t-0"), LogConfig(**config), self.clock.time_ms)  # type: ignore[arg-type]
        self.part = Partition("t", 0, plog, env)

    def lead(self, replicas: list[int], isr: list[int], epoch: int = 0) -> Partition:
        self.part.update_assignment_and_isr(replicas, isr, 0, 1, same_epoch=False)
        self.part.make_leader(epoch)
        return self.part

    async def settle(self) -> None:
        """Let the ISR writes in flight complete (the single node's store answers at once)."""
        for _ in range(10):
            await asyncio.sleep(0)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_a_leader_alone_in_the_isr_commits_at_once(tmp_path: Path) -> None:
    part = Node(tmp_path).lead([0], [0])
    info = part.append_records_as_leader(make_batch(count=3), required_acks=-1)
    assert (info.base_offset, info.last_offset) == (0, 2)
    assert part.high_watermark == 3
    assert part.replication_outcome(3) == ErrorCode.NONE


def test_the_high_watermark_is_the_smallest_log_end_offset_of_the_isr(tmp_path: Path) -> None:
    node = Node(tmp_path)
    part = node.lead([0, 1, 2], [0, 1, 2])
    part.append_records_as_leader(make_batch(count=4))
    assert part.high_watermark == 0  # no follower has fetched yet
    part.update_follower_fetch_state(1, 4)
    assert part.high_watermark == 0
    part.update_follower_fetch_state(2, 2)
    assert part.high_watermark == 2
    assert part.replication_outcome(4) is None  # an acks=all wait for the batch goes on
    part.update_follower_fetch_state(2, 4)
    assert part.high_watermark == 4
    assert part.replication_outcome(4) == ErrorCode.NONE


def test_no_high_watermark_move_below_the_min_isr(tmp_path: Path) -> None:
    """The strict min-ISR rule: appends with acks=1 go on, but nothing is committed."""
    part = Node(tmp_path, min_insync_replicas=2).lead([0, 1, 2], [0])
    part.append_records_as_leader(make_batch(count=2), required_acks=1)
    assert (part.log_end_offset, part.high_watermark) == (2, 0)
    assert part.replication_outcome(2) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_acks_all_needs_min_insync_replicas_in_the_isr(tmp_path: Path) -> None:
    part = Node(tmp_path, min_insync_replicas=2).lead([0, 1, 2], [0])
    with pytest.raises(KafkaError) as refused:
        part.append_records_as_leader(make_batch(), required_acks=-1)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert part.log_end_offset == 0  # nothing appended


def test_min_insync_replicas_above_the_replicas_asks_for_every_replica(tmp_path: Path) -> None:
    """Kafka 3.7+'s effective min ISR, one value for the append check and the high watermark."""
    part = Node(tmp_path, min_insync_replicas=2).lead([0], [0])
    assert part.min_isr() == 1
    part.append_records_as_leader(make_batch(), required_acks=-1)
    assert part.high_watermark == 1
    assert part.replication_outcome(1) == ErrorCode.NONE
    part = Node(tmp_path / "rf2", min_insync_replicas=3).lead([0, 1], [0])
    with pytest.raises(KafkaError) as refused:
        part.append_records_as_leader(make_batch(), required_acks=-1)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS  # 2 of 2 replicas needed, 1 in sync


def test_only_the_leader_appends(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.part.update_assignment_and_isr([1, 0], [1, 0], 0, 1, same_epoch=False)
    node.part.make_follower(1, 3)
    with pytest.raises(KafkaError) as refused:
        node.part.append_records_as_leader(make_batch())
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert node.part.replication_outcome(1) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_caught_up_follower_joins_the_isr_through_the_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        part = node.lead([0, 1], [0])
        part.append_records_as_leader(make_batch(count=2))
        assert part.high_watermark == 2
        part.update_follower_fetch_state(1, 1)
        assert part.pending_isr is None  # behind the high watermark: not in sync
        part.update_follower_fetch_state(1, 2)
        assert part.pending_isr is not None and part.pending_isr.isr == (0, 1)
        assert part.isr == [0]  # proposed, not stored yet
        assert part.maximal_isr() == [0, 1]  # but the high watermark already waits for it
        part.append_records_as_leader(make_batch())
        assert part.high_watermark == 2
        await node.settle()
        assert (part.isr, part.zk_version, part.pending_isr) == ([0, 1], 1, None)
        assert node.isr_changes.isr_expands == 1
        part.update_follower_fetch_state(1, 3)
        assert part.high_watermark == 3

    run(scenario)


def test_a_lagging_follower_leaves_the_isr_and_waits_answer(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path, min_insync_replicas=3)
        part = node.lead([0, 1, 2], [0, 1, 2])
        part.append_records_as_leader(make_batch())
        wait = asyncio.ensure_future(node.produces.wait(part.tp, 1, 60_000))
        await asyncio.sleep(0)
        node.clock.advance(LAG_MAX_MS)
        part.update_follower_fetch_state(1, 1)  # follower 1 keeps up; follower 2 is silent
        part.maybe_shrink_isr(LAG_MAX_MS)
        assert part.pending_isr is None  # not yet: exactly the lag
        node.clock.advance(1)
        part.maybe_shrink_isr(LAG_MAX_MS)
        assert part.pending_isr is not None and part.pending_isr.isr == (0, 1)
        part.maybe_shrink_isr(LAG_MAX_MS)  # one proposal in flight at a time
        assert node.isr_changes.in_flight() == 1
        await node.settle()
        assert part.isr == [0, 1] and node.isr_changes.isr_shrinks == 1
        assert await wait  # woken: the ISR changed
        assert part.replication_outcome(1) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert part.high_watermark == 0

    run(scenario)


def test_a_lost_compare_and_set_leaves_the_isr_to_the_controller(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        part = node.lead([0, 1], [0])
        part.zk_version = 7  # the store holds version 0: this proposal's compare-and-set fails
        part.update_follower_fetch_state(1, 0)
        assert part.pending_isr is not None
        await node.settle()
        assert (part.isr, part.zk_version, part.pending_isr) == ([0], 7, None)
        assert node.isr_changes.isr_expands == 0

    run(scenario)


def test_a_stored_change_superseded_by_a_new_epoch_is_not_applied(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        part = node.lead([0, 1], [0])
        part.update_follower_fetch_state(1, 0)
        assert part.pending_isr is not None
        part.update_assignment_and_isr([0, 1], [0], 5, 2, same_epoch=False)
        part.make_leader(1)  # the controller moved leadership on meanwhile
        await node.settle()
        assert (part.isr, part.zk_version, part.pending_isr) == ([0], 5, None)

    run(scenario)


def test_become_leader_records_the_epoch_start_and_follower_joins_need_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        part = node.lead([0, 1], [0], epoch=0)
        part.append_records_as_leader(make_batch(count=3))
        part.update_assignment_and_isr([0, 1], [0], 0, 1, same_epoch=False)
        part.make_leader(1)
        assert part.leader_epoch_start_offset == 3
        assert part.end_offset_for_epoch(0) == (0, 3)
        part.update_follower_fetch_state(1, 3)
        assert part.pending_isr is not None and part.pending_isr.isr == (0, 1)
        await node.settle()

    run(scenario)


def test_appends_wake_followers_and_high_watermark_moves_wake_consumers(tmp_path: Path) -> None:
    async def scenario() -> None:
        node = Node(tmp_path)
        part = node.lead([0, 1], [0, 1])
        part.update_follower_fetch_state(1, 0)
        follower = asyncio.ensure_future(node.purgatory.wait([part.log_end_key], 60_000))
        consumer = asyncio.ensure_future(node.purgatory.wait([part.tp], 60_000))
        await asyncio.sleep(0)
        part.append_records_as_leader(make_batch())
        await asyncio.sleep(0)
        assert follower.done() and not consumer.done()
        part.update_follower_fetch_state(1, 1)
        await asyncio.sleep(0)
        assert consumer.done() and part.high_watermark == 1

    run(scenario)


def test_followers_read_to_the_log_end_and_consumers_below_the_high_watermark(tmp_path: Path) -> None:
    part = Node(tmp_path).lead([0, 1], [0, 1])
    part.append_records_as_leader(make_batch(count=2))
    assert len(part.read_for_follower(0, 1 << 20, True)) > 0
    assert len(part.read_records(0, 1 << 20, True)) == 0  # nothing committed yet
    part.update_follower_fetch_state(1, 2)
    assert len(part.read_records(0, 1 << 20, True)) == len(part.read_for_follower(0, 1 << 20, True))


def test_high_watermark_news_only_with_a_replica_selector(tmp_path: Path) -> None:
    selector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    for configured, expected in ((None, False), (selector, True)):
        node = Node(tmp_path / str(configured is None), replica_selector=configured)
        part = node.lead([0, 1], [0, 1])
        part.update_follower_fetch_state(1, 0)
        assert not part.take_high_watermark_news(1)  # first answer: nothing to compare with
        part.append_records_as_leader(make_batch())
        part.update_follower_fetch_state(1, 1)
        assert part.take_high_watermark_news(1) is expected
        assert not part.take_high_watermark_news(1)  # told once


def test_list_offsets_and_delete_records_as_leader(tmp_path: Path) -> None:
    part = Node(tmp_path).lead([0], [0])
    part.append_records_as_leader(make_batch(count=2, timestamp=5_000))
    part.append_records_as_leader(make_batch(count=2, timestamp=9_000))
    assert part.fetch_offset_for_timestamp(-1, read_committed=False, from_consumer=True) == (-1, 4, 0)
    assert part.fetch_offset_for_timestamp(-2, read_committed=False, from_consumer=True) == (-1, 0, 0)
    assert part.fetch_offset_for_timestamp(6_000, read_committed=False, from_consumer=True) == (9_000, 2, 0)
    assert part.fetch_offset_for_timestamp(10_000, read_committed=False, from_consumer=True) == (-1, -1, -1)
    # the specials of ListOffsets v7+: max timestamp (KIP-734), local log start (KIP-405), nothing tiered
    assert part.fetch_offset_for_timestamp(-3, read_committed=False, from_consumer=True) == (9_000, 2, 0)
    assert part.fetch_offset_for_timestamp(-4, read_committed=False, from_consumer=True) == (-1, 0, 0)
    assert part.fetch_offset_for_timestamp(-5, read_committed=False, from_consumer=True) == (-1, -1, -1)
    with pytest.raises(KafkaError) as unknown:
        part.fetch_offset_for_timestamp(-9, read_committed=False, from_consumer=True)
    assert unknown.value.code == ErrorCode.INVALID_REQUEST
    assert part.delete_records_before(2) == 2
    assert part.delete_records_before(-1) == 4  # -1: up to the high watermark
    with pytest.raises(KafkaError) as beyond:
        part.delete_records_before(5)
    assert beyond.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_new_leader_behind_its_epoch_start_answers_consumers_offset_not_available(tmp_path: Path) -> None:
    node = Node(tmp_path)
    part = node.lead([0, 1], [0, 1])
    part.append_records_as_leader(make_batch(count=2))  # not committed: follower 1 has not fetched
    part.update_assignment_and_isr([0, 1], [0, 1], 0, 1, same_epoch=False)
    part.make_leader(1)
    with pytest.raises(KafkaError) as lagging:
        part.fetch_offset_for_timestamp(-1, read_committed=False, from_consumer=True)
    assert lagging.value.code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert part.fetch_offset_for_timestamp(-1, read_committed=False, from_consumer=False) == (-1, 0, 1)


def test_a_clients_leader_epoch_must_be_the_partitions(tmp_path: Path) -> None:
    part = Node(tmp_path).lead([0], [0], epoch=4)
    part.check_leader_epoch(-1)  # none sent (before KIP-320)
    part.check_leader_epoch(4)
    for epoch, code in ((3, ErrorCode.FENCED_LEADER_EPOCH), (5, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(KafkaError) as refused:
            part.check_leader_epoch(epoch)
        assert refused.value.code == code
