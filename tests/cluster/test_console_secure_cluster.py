"""The console on a 3-broker ZooKeeper cluster with SASL listeners and ACLs, in headless Chromium.

alice may describe and read topic ``orders`` and nothing else; bob may do nothing; admin is a super user.
Every broker answers every page and says which broker answered: alice browses ``orders``' only partition
(RF 1) from each broker, the two without a replica reading it from its leader over the Kafka protocol;
she sees only ``orders`` in the topic list and the cluster page's counts, is refused other topics, ACLs,
users and actions (403), and no one without a login gets anything (401); admin sees a group from every
broker (its coordinator's facts and lag, fetched over the Kafka protocol by the others), the ACLs and
SCRAM users, and creates a topic through a broker that is not the controller, with its confirmation step."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from selenium.webdriver.common.by import By

from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.browser import chromium, click_and_wait, screenshot
from tests.cluster.conftest import FAST, wait_until
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SETTINGS = {
    "listeners": "CLIENT://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT",
    "inter.broker.listener.name": "CLIENT",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.client.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin;User:broker",
    "http.listeners": "http://127.0.0.1:0",
    "http.console.history.interval.ms": "1000",
}


def _client(user: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    require_zookeeper()
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start()
    started: list[BrokerProcess] = []
    try:
        for broker_id in range(3):
            settings = {**FAST, **SETTINGS, "broker.id": str(broker_id), "zookeeper.connect": zk.connect}
            started.append(BrokerProcess(tmp_path / f"broker-{broker_id}", settings))
            started[-1].start()
        yield started
    finally:
        for proc in started:
            proc.stop(timeout_s=20)
        zk.stop()


def _status(url: str, user: str | None = None) -> int:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{user}-secret".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _as(user: str, url: str) -> str:
    return url.replace("http://", f"http://{user}:{user}-secret@", 1)


def test_console_on_a_secure_cluster(brokers: list[BrokerProcess]) -> None:
    bootstrap = brokers[0].listeners["CLIENT"]
    admin = AdminClient({"bootstrap.servers": bootstrap, **_client("admin")})
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 60, "3 live brokers")
    for name in ("orders", "secret"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    alice_acls = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", op,
                   AclPermissionType.ALLOW)
        for op in (AclOperation.DESCRIBE, AclOperation.READ)
    ]  # fmt: skip
    for future in admin.create_acls(alice_acls).values():
        future.result(30)
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"c"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, **_client("admin")})
    for i in range(5):
        producer.produce("orders", f"order-{i}".encode(), key=f"o{i}".encode())
    assert producer.flush(30) == 0
    leader = admin.list_topics("orders", timeout=10).topics["orders"].partitions[0].leader
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", **_client("admin")})
    consumer.commit(offsets=[TopicPartition("orders", 0, 2)], asynchronous=False)
    consumer.close()

    urls = [str(b.http_url) for b in brokers]
    for url in urls:
        for path in ("/ui/", "/ui/topics/orders/0", "/metrics", "/subjects"):
            assert _status(url + path) == 401, path
        wait_until(lambda url=url: _status(url + "/ui/topics/orders", "alice") == 200, 30, "alice's ACLs")
        assert _status(url + "/ui/topics/secret", "alice") == 403
        assert _status(url + "/ui/topics/orders/0", "bob") == 403
        assert _status(url + "/metrics", "bob") == 403
        assert _status(url + "/ui/acls", "alice") == 403

    with chromium() as driver:
        d: Any = driver
        for broker_id, url in enumerate(urls):
            d.get(_as("alice", url) + "/ui/topics/orders/0?n=3")
            rows = d.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
            assert [r.text.split()[0] for r in rows] == ["4", "3", "2"], broker_id
            footer = d.find_element(By.ID, "answered-by").text
            assert footer == f"Answered by broker {broker_id} to User:alice.", footer
            hosted = "read from its leader" not in d.page_source
            assert hosted == (broker_id == leader)
            screenshot(d, f"secure-partition-from-broker-{broker_id}")
            d.get(_as("alice", url) + "/ui/topics")
            listed = d.find_element(By.ID, "topics").text
            assert "orders" in listed and "secret" not in listed
            d.get(_as("alice", url) + "/ui/")  # topics and partitions: only those she may describe
            facts = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#cluster-facts tbody td")]
            assert facts[4:] == ["1", "1"], facts

        # An action alice has no right to: refused after the form, before any confirmation.
        d.get(_as("alice", urls[1]) + "/ui/actions/delete-records?topic=orders")
        d.find_element(By.NAME, "partition").send_keys("0")
        d.find_element(By.NAME, "offset").send_keys("2")
        click_and_wait(d, d.find_element(By.CSS_SELECTOR, "#action-form button"))
        assert "Forbidden" in d.title
        assert "needs DELETE on TOPIC 'orders'" in d.find_element(By.TAG_NAME, "main").text

    with chromium() as driver:  # a fresh browser: Chromium keeps the first login of an origin
        d = driver
        d.get(_as("admin", urls[2]) + "/ui/")  # orders, secret and __consumer_offsets
        facts = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#cluster-facts tbody td")]
        assert int(facts[4]) >= 3 and int(facts[5]) > 2, facts
        d.get(_as("admin", urls[2]) + "/ui/acls")
        acls = d.find_element(By.ID, "acls").text
        assert "Topic orders Literal User:alice * Read Allow" in acls
        screenshot(d, "secure-acls")
        d.get(_as("admin", urls[2]) + "/ui/users")
        assert "carol SCRAM-SHA-256 (4,096 iterations)" in d.find_element(By.ID, "users").text
        screenshot(d, "secure-users")

        # The group lives on one coordinator; every broker draws it, lag per partition included.
        for broker_id, url in enumerate(urls):
            d.get(_as("admin", url) + "/ui/groups")
            assert "billing classic Empty 0" in d.find_element(By.ID, "groups").text, broker_id
            d.get(_as("admin", url) + "/ui/groups/billing")
            assert "orders 0 2 5 3" in d.find_element(By.ID, "lag").text, broker_id
            assert d.find_element(By.ID, "coordinator").text.startswith("Coordinated by broker")
        screenshot(d, "secure-group-from-another-broker")

        # An ongoing transaction, listed by every broker with its coordinator.
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-billing", **_client("admin")})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("orders", b"pending")
        txn.flush(30)
        for url in urls:
            d.get(_as("admin", url) + "/ui/transactions")
            assert "tx-billing Ongoing" in d.find_element(By.ID, "transactions").text
        screenshot(d, "secure-transactions")
        txn.abort_transaction(30)

        d.get(_as("admin", urls[2]) + "/ui/actions/create-topic")
        d.find_element(By.NAME, "topic").send_keys("made-in-console")
        partitions = d.find_element(By.NAME, "partitions")
        partitions.clear()
        partitions.send_keys("3")
        click_and_wait(d, d.find_element(By.CSS_SELECTOR, "#action-form button"))
        assert (
            "Create topic 'made-in-console' with 3 partitions" in d.find_element(By.ID, "confirm-what").text
        )
        click_and_wait(d, d.find_element(By.ID, "confirm"))
        assert "created" in d.find_element(By.ID, "action-result").text
    wait_until(
        lambda: (
            len(admin.list_topics("made-in-console", timeout=5).topics["made-in-console"].partitions) == 3
        ),
        30,
        "the topic the console created",
    )
