"""KIP-360 (producer epoch bumps) and KIP-447 (group metadata in TxnOffsetCommit, OffsetFetch
require_stable) with real clients against a real broker process.

The abortable error: a transactional record for a topic whose ``min.insync.replicas`` (2) its one
replica cannot meet is retried until ``message.timeout.ms`` and then times out; librdkafka makes that
an abortable error that needs an epoch bump, which it asks for with InitProducerId v3+ carrying its
producer id and epoch (before KIP-360 support it was fatal).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api import ApiKey
from strom.testing import BrokerProcess

from .rawclient import RawClient
from .test_transactions import BROKER_CONFIG, consume_all, create_topic, txn_producer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("txkips") / "data", BROKER_CONFIG)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class ProtocolLog(logging.Handler):
    """librdkafka's debug lines (``debug=protocol``), kept to check the versions it negotiated."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def logger(self) -> logging.Logger:
        logger = logging.getLogger(f"strom.test.librdkafka.{uuid.uuid4().hex[:8]}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(self)
        return logger

    def sent(self, request: str) -> list[str]:
        return [line for line in self.lines if f"Sent {request}Request" in line]


def unreplicable_topic(bootstrap: str) -> str:
    name = f"under-isr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={"min.insync.replicas": "2"})])[name].result(10)
    return name


def test_librdkafka_bumps_its_epoch_after_an_abortable_error(broker: BrokerProcess) -> None:
    good, bad = create_topic(broker.bootstrap), unreplicable_topic(broker.bootstrap)
    tid = f"bump-{uuid.uuid4().hex[:6]}"
    log = ProtocolLog()
    producer = txn_producer(
        broker.bootstrap, tid, **{"message.timeout.ms": 1500, "debug": "protocol", "logger": log.logger()}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(good, b"aborted")
    producer.produce(bad, b"never")
    producer.flush(10)
    with pytest.raises(KafkaException) as info:
        producer.commit_transaction(10)
    assert info.value.args[0].txn_requires_abort() and not info.value.args[0].fatal()
    producer.abort_transaction(30)  # EndTxn(abort), then InitProducerId with its id and epoch
    producer.begin_transaction()
    producer.produce(good, b"committed")
    producer.commit_transaction(30)
    sent = log.sent("InitProducerId")
    assert len(sent) == 2 and all("(v4," in line for line in sent), sent
    with RawClient(broker.bootstrap) as raw:
        (desc,) = raw.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})[
            "transaction_states"
        ]
    assert (desc["producer_epoch"], desc["transaction_state"]) == (1, "CompleteCommit")
    assert consume_all(broker.bootstrap, good, "read_committed") == [b"committed"]
