"""The console's registry, security and transaction pages and its actions on a single broker, in headless
Chromium: subjects and a diff between two versions, an ongoing transaction and its producer's state,
SCRAM users, "no authorizer"; create a topic, add partitions, alter a config, delete records and reset an
empty group's offsets, each through its confirmation page; a non-empty group's reset refused; a POST
without the form's CSRF token refused. Screenshots in test-artifacts/console/."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from selenium.webdriver.common.by import By

from strom.testing import BrokerProcess
from tests.browser import chromium, click_and_wait, screenshot

V1 = {"type": "record", "name": "Click", "fields": [{"name": "user", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int", "default": 0}],
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("console-admin") / "data", {"group.initial.rebalance.delay.ms": "0"}
    ) as proc:
        yield proc


def _register(url: str, subject: str, schema: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=json.dumps({"schema": json.dumps(schema)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()


def _act(d: Any, base: str, action: str, query: str, fields: dict[str, str]) -> str:
    """Fill an action's form, review, confirm; the result's text (screenshots of each step)."""
    d.get(f"{base}/ui/actions/{action}?{query}")
    for name, value in fields.items():
        element = d.find_element(By.NAME, name)
        if element.tag_name == "select":
            element.find_element(By.CSS_SELECTOR, f"option[value='{value}']").click()
        else:
            element.clear()
            element.send_keys(value)
    screenshot(d, f"action-{action}-form")
    click_and_wait(d, d.find_element(By.CSS_SELECTOR, "#action-form button"))
    assert d.find_elements(By.ID, "confirm-what"), d.find_element(By.TAG_NAME, "body").text
    screenshot(d, f"action-{action}-confirm")
    click_and_wait(d, d.find_element(By.ID, "confirm"))
    assert d.find_elements(By.ID, "action-result"), d.find_element(By.TAG_NAME, "body").text
    return str(d.find_element(By.ID, "action-result").text)


def test_registry_security_pages_and_actions(broker: BrokerProcess) -> None:
    assert broker.http_url is not None
    base = broker.http_url
    tag = uuid.uuid4().hex[:6]
    topic, group = f"adm-{tag}", f"adm-g-{tag}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    _register(base, f"{topic}-value", V1)
    _register(base, f"{topic}-value", V2)
    upsert = UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"e"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{tag}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, f"v{i}".encode())
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(0.5)

    with chromium() as driver:
        d: Any = driver
        d.get(f"{base}/ui/schemas")
        assert f"{topic}-value 2 AVRO" in d.find_element(By.ID, "subjects").text
        screenshot(d, "schemas")
        d.get(f"{base}/ui/schemas/{topic}-value?diff=1,2")
        diff = d.find_element(By.ID, "diff")
        added = [e.text for e in diff.find_elements(By.CSS_SELECTOR, ".add")]
        assert any('"name": "n"' in line for line in added), added
        assert "BACKWARD (global)" in d.find_element(By.ID, "subject-settings").text
        screenshot(d, "schema-diff")

        d.get(f"{base}/ui/transactions")
        txns = d.find_element(By.ID, "transactions").text
        assert f"tx-{tag} Ongoing" in txns and f"{topic}-0" in txns
        screenshot(d, "transactions")
        d.get(f"{base}/ui/topics/{topic}/0")
        assert d.find_elements(By.CSS_SELECTOR, "#producers tbody tr")
        screenshot(d, "partition-producers")
        d.get(f"{base}/ui/users")
        assert "erin SCRAM-SHA-512 (8,192 iterations)" in d.find_element(By.ID, "users").text
        screenshot(d, "users")
        d.get(f"{base}/ui/acls")
        assert d.find_element(By.ID, "no-authorizer")
        screenshot(d, "acls-without-authorizer")
        producer.commit_transaction(30)

        assert "now has 3 partitions" in _act(d, base, "add-partitions", f"topic={topic}", {"count": "3"})
        result = _act(d, base, "alter-config", f"topic={topic}", {"name": "retention.ms", "value": "7200000"})
        assert "retention.ms = 7200000" in result
        assert "starts at offset 4" in _act(
            d, base, "delete-records", f"topic={topic}", {"partition": "0", "offset": "4"}
        )
        created = f"made-{tag}"
        assert "created" in _act(
            d,
            base,
            "create-topic",
            "",
            {"topic": created, "partitions": "2", "configs": "cleanup.policy=compact"},
        )
        screenshot(d, "action-done")

        # The group has a member: Kafka resets only an empty group's offsets.
        refused = _act(d, base, "reset-offsets", f"group={group}&topic={topic}", {"to": "earliest"})
        assert "stop its consumers first" in refused
        consumer.close()
        reset = _act(
            d, base, "reset-offsets", f"group={group}&topic={topic}", {"to": "offset", "offset": "6"}
        )
        assert "reset to offset 6" in reset

    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(30)
    assert configs["retention.ms"].value == "7200000"
    assert len(admin.list_topics(created, timeout=10).topics[created].partitions) == 2
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    check.close()
    assert [tp.offset for tp in committed] == [6, 6, 6]


def test_a_post_without_the_forms_token_is_refused(broker: BrokerProcess) -> None:
    request = urllib.request.Request(
        f"{broker.http_url}/ui/actions/create-topic",
        data=b"topic=evil&partitions=1&replication_factor=1&confirm=yes",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "evil" not in admin.list_topics(timeout=10).topics


def test_a_kip848_consumer_group_shows_its_own_type_and_state(broker: BrokerProcess) -> None:
    """A consumer group (KIP-848, joined by ConsumerGroupHeartbeat) is listed and drawn as the coordinator
    reports it: type consumer, its state, its member's assignment, its epoch, its lag."""
    from strom.protocol.api import ApiKey
    from tests.integration.rawclient import RawClient
    from tests.integration.test_consumer_group_protocol import heartbeat, topic_ids

    tag = uuid.uuid4().hex[:6]
    topic, group = f"kip848-{tag}", f"kip848-g-{tag}"
    with RawClient(broker.bootstrap) as raw:
        assert raw.create_topic(topic, 2) == 0
        joined = heartbeat(raw, 0, group, "", 0, subscribed_topic_names=[topic], rebalance_timeout_ms=30_000)
        assert joined["error_code"] == 0, joined
        member_id = joined["member_id"]
        owned = [{"topic_id": topic_ids(raw, group)[topic], "partitions": [0, 1]}]
        assert heartbeat(raw, 0, group, member_id, 1, topic_partitions=owned)["error_code"] == 0
        commit = {
            "group_id": group,
            "generation_id_or_member_epoch": 1,
            "member_id": member_id,
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 0}]}],
        }
        assert raw.call(ApiKey.OFFSET_COMMIT, 7, commit)["topics"][0]["partitions"][0]["error_code"] == 0
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(4):
            producer.produce(topic, f"r{i}".encode(), partition=0)
        assert producer.flush(30) == 0

        with chromium() as driver:
            d: Any = driver
            d.get(f"{broker.http_url}/ui/groups")
            assert f"{group} consumer Stable 1 4" in d.find_element(By.ID, "groups").text
            d.get(f"{broker.http_url}/ui/groups/{group}")
            facts = d.find_element(By.ID, "group-facts").text
            assert "consumer Stable consumer" in facts, facts
            assert f"{member_id}" in d.find_element(By.ID, "members").text
            assert f"{topic}: 0,1" in d.find_element(By.ID, "members").text
            assert f"{topic} 0 0 4 4" in d.find_element(By.ID, "lag").text
            screenshot(d, "group-kip848")
        heartbeat(raw, 0, group, member_id, -1)


def test_quotas_page_lists_the_client_quotas(broker: BrokerProcess) -> None:
    from tests.integration.quota_clients import strom_quotas

    user = f"q-{uuid.uuid4().hex[:6]}"
    args = ("--entity-type", "users", "--entity-name", user, "--add-config", "producer_byte_rate=1024")
    done = strom_quotas(broker.bootstrap, "alter", *args)
    assert done.returncode == 0, done.stderr
    with chromium() as driver:
        d: Any = driver
        deadline = time.monotonic() + 30
        while True:  # the broker re-reads quotas on the store's change notification
            d.get(f"{broker.http_url}/ui/quotas")
            if d.find_elements(By.ID, "quotas") and user in d.find_element(By.ID, "quotas").text:
                break
            assert time.monotonic() < deadline, d.find_element(By.TAG_NAME, "main").text
            time.sleep(0.3)
        assert f"user-principal '{user}' producer_byte_rate=1024" in d.find_element(By.ID, "quotas").text
        screenshot(d, "quotas")
