"""pytest plugin (entry point `pytest11: strom`): real Strom brokers for any project's test suite.

Fixtures:
- `strom_broker` (session scope): a broker on an ephemeral loopback port with a temporary data dir;
  yields its bootstrap address, e.g. "127.0.0.1:40123". The JVM-free Kafka for your tests.
- `strom_broker_factory` (function scope): `factory(**overrides)` starts a further broker with Kafka
  config overrides (dots as in Kafka: `factory(**{"log.retention.ms": "1000"})`) and returns its
  `BrokerProcess` (start/stop/kill/restart); every broker it made is stopped after the test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from strom.testing.broker_process import BrokerProcess

_counter = itertools.count()


@pytest.fixture(scope="session")
def strom_broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("strom") / "broker")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def strom_broker(strom_broker_process: BrokerProcess) -> str:
    return strom_broker_process.bootstrap


@pytest.fixture
def strom_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., BrokerProcess]]:
    made: list[BrokerProcess] = []

    def factory(**overrides: str) -> BrokerProcess:
        base = tmp_path_factory.mktemp("strom-extra")
        broker = BrokerProcess(base / f"broker{next(_counter)}", overrides)
        made.append(broker)
        broker.start()
        return broker

    try:
        yield factory
    finally:
        for broker in made:
            broker.stop()
