"""ACL and SCRAM credential changes in a ZooKeeper cluster wait for ZooKeeper off the event loop: with
ZooKeeper paused (SIGSTOP) while a CreateAcls, DeleteAcls or AlterUserScramCredentials is in progress,
a Metadata request on another connection is still answered at once, and the change completes once
ZooKeeper runs again (the Metadata waited the whole pause, 1.2 s of 1.5, before the change)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from strom.protocol.api import ApiKey
from strom.testing.broker_process import BrokerProcess
from strom.testing.zookeeper_process import ZooKeeperProcess
from tests.cluster.conftest import wait_until
from tests.integration.rawclient import RawClient
from tests.prerequisites import require_zookeeper

pytestmark = pytest.mark.cluster

PAUSE_S = 2.0  # well inside the ZooKeeper session (6 s) and kazoo's read timeout (4 s)


@pytest.fixture
def zk_broker(tmp_path: Path) -> Iterator[tuple[ZooKeeperProcess, BrokerProcess]]:
    require_zookeeper()
    zk = ZooKeeperProcess(tmp_path / "zk")
    zk.start()
    settings = {
        "broker.id": "0",
        "zookeeper.connect": zk.connect,
        "zookeeper.session.timeout.ms": "6000",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    try:
        with BrokerProcess(tmp_path / "broker", settings) as broker:
            yield zk, broker
    finally:
        zk.stop()


def _binding(topic: str) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )


def _while_zookeeper_paused(
    zk: ZooKeeperProcess, broker: BrokerProcess, start: Callable[[], Future[Any]]
) -> Any:
    """Pause ZooKeeper, start the change, and check another connection is served meanwhile."""
    assert zk.pid is not None
    os.kill(zk.pid, signal.SIGSTOP)
    resume = threading.Timer(PAUSE_S, os.kill, (zk.pid, signal.SIGCONT))
    resume.start()
    try:
        change = start()
        time.sleep(0.3)  # the request reaches the broker, whose write now waits for ZooKeeper
        with RawClient(broker.bootstrap, timeout_s=10) as raw:
            started = time.monotonic()
            metadata = raw.call(ApiKey.METADATA, 1, {"topics": None})
            took_s = time.monotonic() - started
        assert metadata["brokers"], metadata
        assert not change.done(), "the change finished while ZooKeeper was paused"
        assert took_s < 0.8, f"Metadata took {took_s:.2f} s while ZooKeeper was paused"
        return change.result(timeout=30)
    finally:
        resume.join()
        os.kill(zk.pid, signal.SIGCONT)


def test_acl_and_scram_writes_do_not_stall_the_listener(
    zk_broker: tuple[ZooKeeperProcess, BrokerProcess],
) -> None:
    zk, broker = zk_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # librdkafka sends the ACL APIs to the controller: wait until Metadata names one.
    wait_until(lambda: admin.list_topics(timeout=5).controller_id == 0, 30, "a controller")
    admin.create_acls([_binding("warm-up")])[_binding("warm-up")].result(30)

    _while_zookeeper_paused(zk, broker, lambda: admin.create_acls([_binding("paused")])[_binding("paused")])
    only = AclBindingFilter(
        ResourceType.TOPIC,
        "paused",
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = admin.describe_acls(only).result(30)
    assert [b.principal for b in described] == ["User:alice"]

    upsert = UserScramCredentialUpsertion(
        "zed", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw"
    )
    _while_zookeeper_paused(zk, broker, lambda: admin.alter_user_scram_credentials([upsert])["zed"])
    assert "zed" in admin.describe_user_scram_credentials(["zed"])["zed"].result(30).user

    deleted = _while_zookeeper_paused(zk, broker, lambda: admin.delete_acls([only])[only])
    assert [b.name for b in deleted] == ["paused"]
