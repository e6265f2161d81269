"""Several named listeners on one broker: each serves clients, and the start-up lines name them."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer

from strom.testing.broker_process import BrokerProcess


def test_two_named_listeners_serve_clients(tmp_path: Path) -> None:
    overrides = {
        "listeners": "INTERNAL://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }
    with BrokerProcess(tmp_path / "b", overrides) as broker:
        assert set(broker.listeners) == {"INTERNAL", "CLIENT"}
        assert broker.bootstrap == broker.listeners["INTERNAL"]
        producer = Producer({"bootstrap.servers": broker.listeners["CLIENT"]})
        producer.produce("two-listeners", b"v")
        assert producer.flush(15) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": broker.listeners["INTERNAL"],
                "group.id": "g",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["two-listeners"])
        try:
            for _ in range(30):
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    assert msg.value() == b"v"
                    break
            else:
                raise AssertionError("no record consumed")
        finally:
            consumer.close()
