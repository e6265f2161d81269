"""The controller mutation quota over TCP (KIP-599): kafka-python's admin client (CreateTopics v7,
CreatePartitions v3, DeleteTopics v6, the strict versions) sees a topic refused with
THROTTLING_QUOTA_EXCEEDED while it is over its ``controller_mutation_rate``, and admitted again once the
token bucket has refilled; an older CreateTopics version (v5, permissive) is never refused but carries
the throttle time. Quotas are set with ``strom quotas`` (AlterClientQuotas).

The broker measures over 2 windows of 1 s, so a client's bucket holds one second of its quota."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.quota_clients import strom_quotas
from tests.integration.rawclient import RawClient

THROTTLED = int(ErrorCode.THROTTLING_QUOTA_EXCEEDED)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path_factory.mktemp("mutation-quota") / "data",
        {"quota.window.num": "2", "quota.window.size.seconds": "1"},
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _limit(bootstrap: str, client_id: str, rate: float) -> None:
    done = strom_quotas(
        bootstrap,
        "alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client_id,
        "--add-config",
        f"controller_mutation_rate={rate}",
    )
    assert done.returncode == 0, done.stderr


def _errors(response: dict[str, Any], key: str) -> dict[str, tuple[int, str | None]]:
    return {r["name"]: (r["error_code"], r["error_message"]) for r in response[key]}


def _codes(response: Any, key: str) -> list[tuple[str, int]]:
    """(topic, error code) of a kafka-python admin answer, a dict or its response object."""
    results = response[key] if isinstance(response, dict) else getattr(response, key)
    return [(r["name"], r["error_code"]) if isinstance(r, dict) else (r.name, r.error_code) for r in results]


def test_strict_versions_refuse_topics_while_the_client_is_over_its_quota(broker: BrokerProcess) -> None:
    client_id = f"mut-{uuid.uuid4().hex[:6]}"
    _limit(broker.bootstrap, client_id, 5)  # a bucket of 5 partitions, refilled at 5 per second
    big, small, other = (f"mq-{uuid.uuid4().hex[:8]}" for _ in range(3))

    def admin() -> KafkaAdminClient:
        # A refusal mutes its connection for the throttle time (as Kafka does): each request that
        # must reach the broker inside the debt gets a connection of its own.
        return KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=client_id)

    clients = [admin() for _ in range(5)]
    try:
        # The bucket is full: the topic is admitted and overdraws it by 55 partitions (11 s of refill).
        made = clients[0].create_topics(
            {big: {"num_partitions": 60, "replication_factor": 1}}, raise_errors=False
        )
        started = time.monotonic()
        assert _errors(made, "topics") == {big: (0, None)}
        refused = clients[1].create_topics(
            {small: {"num_partitions": 1, "replication_factor": 1}, other: {"num_partitions": 1}},
            raise_errors=False,
        )
        message = "The throttling quota has been exceeded."
        assert _errors(refused, "topics") == {small: (THROTTLED, message), other: (THROTTLED, message)}
        grown = clients[2].create_partitions({big: NewPartitions(61)}, raise_errors=False)
        assert _codes(grown, "results") == [(big, THROTTLED)]
        kept = clients[3].delete_topics([big], raise_errors=False)
        assert _codes(kept, "topics") == [(big, THROTTLED)]
        assert time.monotonic() - started < 10.0  # all inside the debt, or the refusals prove nothing
        topics = clients[4].list_topics()
        assert big in topics and small not in topics and other not in topics
        assert len(clients[4].describe_topics([big])[0]["partitions"]) == 60  # not grown
        time.sleep(max(0.0, 11.5 - (time.monotonic() - started)))  # the bucket back above zero
        with_more = admin()
        clients.append(with_more)
        grown = with_more.create_partitions({big: NewPartitions(61)}, raise_errors=False)
        assert _codes(grown, "results") == [(big, 0)]
        assert len(with_more.describe_topics([big])[0]["partitions"]) == 61
    finally:
        for client in clients:
            client.close()


def test_a_permissive_version_creates_the_topic_and_throttles_the_client(broker: BrokerProcess) -> None:
    client_id = f"mut-{uuid.uuid4().hex[:6]}"
    _limit(broker.bootstrap, client_id, 2)
    first, second = f"mq-{uuid.uuid4().hex[:8]}", f"mq-{uuid.uuid4().hex[:8]}"

    def create(raw: RawClient, name: str) -> dict[str, Any]:
        topic = {"name": name, "num_partitions": 6, "replication_factor": 1, "assignments": [], "configs": []}
        body = {"topics": [topic], "timeout_ms": 10_000, "validate_only": False}
        response: dict[str, Any] = raw.call(ApiKey.CREATE_TOPICS, 5, body)
        return response

    with RawClient(broker.bootstrap, client_id=client_id) as raw:
        made = create(raw, first)
        assert made["topics"][0]["error_code"] == 0
        # 6 partitions from a bucket of 2 at 2 per second: 2 s owed, reported and enforced by muting.
        assert 1000 < made["throttle_time_ms"] <= 2000
        started = time.monotonic()
        again = create(raw, second)  # admitted too, deeper in debt: v5 knows no refusal
        assert again["topics"][0]["error_code"] == 0
        assert again["throttle_time_ms"] > 2000
        # The connection was muted for the first throttle: the second answer came after it.
        assert time.monotonic() - started >= 1.0
