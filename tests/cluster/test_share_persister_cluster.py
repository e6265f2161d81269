"""A share-partition leader whose share coordinator is gone (KIP-932), on three brokers and a real
ZooKeeper, over raw ShareFetch / ShareAcknowledge.

``__share_group_state`` has one partition and one replica, on broker X; a topic's two partitions are
led by broker Y. A member acquires records of both partitions at Y, then X is killed with SIGKILL and
the member accepts them: the writes cannot be made durable, so

* the acknowledgement is answered with the write's error within the request's own time (the two
  partitions' writes at once, each retried for ShareAcknowledge's bound), not after one 15 s retry
  loop per partition;
* the records are put back as they were (the leader's memory does not say accepted what the share
  coordinator does not): once X is back, the member's next acceptance of the same records succeeds,
  where a leader that kept them accepted would answer INVALID_RECORD_STATE. The stored start offset
  (DescribeShareGroupOffsets) then passes them.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing.cluster import LocalCluster
from tests.cluster.conftest import partitions_of, wait_until
from tests.cluster.test_share_groups_cluster import coordinator_of
from tests.integration.rawclient import RawClient
from tests.integration.test_share_groups import topic_id_of
from tests.integration.test_share_state import describe_offsets, start_offsets

GROUP, TOPIC, WARM = "persister-g", "persister-jobs", "persister-warm"
STATE_TOPIC = "__share_group_state"
PER_PARTITION = 5
ACKNOWLEDGE_TIMEOUT_S = 25.0  # a client request timeout the broker must answer inside
SETTINGS = {
    "offsets_topic_replication_factor": "3",
    "share_auto_offset_reset": "earliest",
    "share_coordinator_state_topic_num_partitions": "1",
    "share_coordinator_state_topic_replication_factor": "1",
    "group_share_record_lock_duration_ms": "300000",  # the member holds its records throughout
    "group_share_session_timeout_ms": "300000",
}
ACCEPT = [{"first_offset": 0, "last_offset": PER_PARTITION - 1, "acknowledge_types": [1]}]


class Member:
    """One share member's session at a leader, raw: each request at the session's next epoch."""

    def __init__(self, raw: RawClient, topic_id: bytes) -> None:
        self.raw = raw
        self.topic_id = topic_id
        self.epoch = 0

    def _next(self) -> int:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return epoch

    def fetch(self, acks: dict[int, list[Any]]) -> Any:
        body = {
            "group_id": GROUP,
            "member_id": "m",
            "share_session_epoch": self._next(),
            "max_wait_ms": 500,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "topics": [
                {
                    "topic_id": self.topic_id,
                    "partitions": [
                        {"partition_index": p, "acknowledgement_batches": acks.get(p, [])} for p in (0, 1)
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }
        answer = self.raw.call(ApiKey.SHARE_FETCH, 1, body)
        assert answer["error_code"] == 0, answer
        return answer

    def acknowledge(self, partitions: list[int]) -> dict[int, int]:
        """Accept the first records of ``partitions``: partition -> its error code."""
        body = {
            "group_id": GROUP,
            "member_id": "m",
            "share_session_epoch": self._next(),
            "topics": [
                {
                    "topic_id": self.topic_id,
                    "partitions": [
                        {"partition_index": p, "acknowledgement_batches": ACCEPT} for p in partitions
                    ],
                }
            ],
        }
        answer = self.raw.call(ApiKey.SHARE_ACKNOWLEDGE, 1, body)
        assert answer["error_code"] == 0, answer
        return {p["partition_index"]: p["error_code"] for t in answer["responses"] for p in t["partitions"]}


def produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    for partition in (0, 1):
        for i in range(PER_PARTITION):
            producer.produce(TOPIC, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(60) == 0


def test_a_failed_acknowledgement_write_is_rolled_back_and_answered_in_time(make_cluster: Any) -> None:
    cluster: LocalCluster = make_cluster(3, **SETTINGS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(WARM, 1, 3)])[WARM].result(30)

    def state_leader() -> list[int]:
        # A describe at the group's coordinator asks for __share_group_state's creation.
        describe_offsets(
            cluster.brokers[coordinator_of(cluster.bootstrap, GROUP)].bootstrap, GROUP, [(WARM, [0])]
        )
        found = partitions_of(cluster.bootstrap, STATE_TOPIC)[0][0]
        return [found] if found >= 0 else []

    found = wait_until(state_leader, 60, f"{STATE_TOPIC}'s leader")
    assert isinstance(found, list)
    state_broker = int(found[0])  # X: the one share coordinator
    leader = (state_broker + 1) % 3
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=[[leader], [leader]])])[TOPIC].result(30)
    produce(cluster.bootstrap)
    with RawClient(cluster.brokers[leader].bootstrap, timeout_s=ACKNOWLEDGE_TIMEOUT_S) as raw:
        member = Member(raw, topic_id_of(raw, TOPIC))
        got: dict[int, list[Any]] = {}

        def acquired_both() -> bool:
            for t in member.fetch({})["responses"]:
                for p in t["partitions"]:
                    got.setdefault(p["partition_index"], []).extend(p["acquired_records"])
            return set(got) == {0, 1}

        assert wait_until(acquired_both, 60, "records of both partitions acquired")
        assert got == {p: [{"first_offset": 0, "last_offset": 4, "delivery_count": 1}] for p in (0, 1)}

        cluster.brokers[state_broker].kill()
        # Answered inside the raw client's 25-s read timeout: the broker's bound is 5 s for both
        # partitions at once plus an attempt already under way (at most 10 s); before, 15 s each, one
        # after the other, outlasted it.
        failed = member.acknowledge([0, 1])
        assert all(code != 0 for code in failed.values()) and set(failed) == {0, 1}, failed

        cluster.brokers[state_broker].start()
        pending = [0, 1]
        deadline = time.monotonic() + 90
        while pending:
            assert time.monotonic() < deadline, f"acceptance of {pending} not made durable"
            codes = member.acknowledge(pending)
            # Kept accepted in memory after the failed write, they would no longer be the member's.
            assert int(ErrorCode.INVALID_RECORD_STATE) not in codes.values(), codes
            pending = [p for p, code in codes.items() if code != 0]
            time.sleep(0.2)

    def stored() -> bool:
        at = cluster.brokers[coordinator_of(cluster.bootstrap, GROUP)].bootstrap
        return start_offsets(describe_offsets(at, GROUP, [(TOPIC, [0, 1])])) == {
            (TOPIC, p): (0, PER_PARTITION) for p in (0, 1)
        }

    assert wait_until(stored, 60, "the stored start offsets past the accepted records")
