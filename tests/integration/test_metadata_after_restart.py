"""Metadata after a clean restart, at a small scale: every topic as it was, topic ids kept.

The broker leaves what start-up built out of the garbage collector's full collections (`gc.freeze`,
strom.broker.main): the first Metadata answer after a restart must list every topic with its
partitions, leaders and ids as before it; a topic deleted after the restart is gone and one created
after it serves records. The time of that first answer at 100,000 partitions is a benchmark
(bench/partitions_bench.py --metadata-restarts), never a timed test.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import BrokerProcess

TOPICS, PARTITIONS = 30, 8


def _describe(
    admin: AdminClient, names: list[str]
) -> dict[str, tuple[str, list[tuple[int, int, list[int]]]]]:
    """Per topic: its id and, per partition, (index, leader, replicas)."""
    described = admin.describe_topics(TopicCollection(names))
    out = {}
    for name, future in described.items():
        topic = future.result(30)
        parts = [(p.id, p.leader.id, [r.id for r in p.replicas]) for p in topic.partitions]
        out[name] = (str(topic.topic_id), parts)
    return out


def test_metadata_after_a_restart_lists_every_topic_as_before(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        names = [f"restart-{i:02d}" for i in range(TOPICS)]
        for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
            future.result(60)
        before = _describe(admin, names)
        assert all(len(parts) == PARTITIONS for _, parts in before.values())
        del admin
        broker.stop()
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = admin.list_topics(timeout=60)  # the first Metadata after the restart
        assert {n: sorted(t.partitions) for n, t in listed.topics.items() if n in before} == {
            n: list(range(PARTITIONS)) for n in names
        }
        assert all(
            p.leader == 0 and p.error is None for n in names for p in listed.topics[n].partitions.values()
        )
        assert _describe(admin, names) == before  # the same ids, leaders and replicas

        admin.delete_topics([names[0]])[names[0]].result(60)
        admin.create_topics([NewTopic("after-restart", 2, 1)])["after-restart"].result(60)
        assert names[0] not in admin.list_topics(timeout=60).topics
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("after-restart", value=b"v", partition=1)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["after-restart"])
        try:
            values = []
            for _ in range(60):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    values.append(msg.value())
                    break
        finally:
            consumer.close()
        assert values == [b"v"]
    finally:
        broker.stop()
