"""The `strom.testing` pytest plugin, used the way another project uses it: installed, not imported.

A throwaway project's test file asks for `strom_broker` and `strom_broker_factory` by name only; the
`pytest11` entry point must provide them, and a real client must be able to use the broker.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

USER_TESTS = """
from confluent_kafka import Consumer, Producer, TopicPartition


def test_round_trip(strom_broker):
    producer = Producer({"bootstrap.servers": strom_broker})
    producer.produce("events", b"hello", key=b"k")
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": strom_broker, "group.id": "g"})
    consumer.assign([TopicPartition("events", 0, 0)])
    msg = None
    for _ in range(40):
        msg = consumer.poll(0.5)
        if msg is not None:
            break
    consumer.close()
    assert msg is not None and msg.value() == b"hello" and msg.key() == b"k"


def test_factory_restart(strom_broker_factory):
    broker = strom_broker_factory(**{"num.partitions": "3"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("t", b"v", partition=2)
    assert producer.flush(20) == 0
    broker.restart()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    low, high = consumer.get_watermark_offsets(TopicPartition("t", 2), timeout=20)
    consumer.close()
    assert (low, high) == (0, 1)
"""


def test_plugin_serves_another_project(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout
