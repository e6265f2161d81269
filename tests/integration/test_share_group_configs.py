"""A share group's own configs (the GROUP config resource, type 32) on one node, over TCP.

``strom configs alter --group`` sets the group's ``share.delivery.count.limit`` to 2 while the broker's
is 3 (IncrementalAlterConfigs, kept in the metadata store): a ``ShareConsumer`` that releases every
record then gets each exactly twice before it is archived, without a restart. Values outside the
broker's bounds (``group.share.min/max...``) and unknown names are refused with INVALID_CONFIG, and
DescribeConfigs shows the group's value with source GROUP_CONFIG, the others the broker's default.
A share group's and a KIP-848 consumer group's own heartbeat intervals are what their members' next
heartbeats are told (ShareGroupHeartbeat, ConsumerGroupHeartbeat over the wire).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.testing import BrokerProcess
from tests.integration.kip848_clients import join_body, wait_until
from tests.integration.rawclient import RawClient
from tests.integration.share_clients import ShareConsumerProcess
from tests.integration.strom_cli import strom
from tests.integration.test_share_groups import (
    DELIVERY_LIMIT,
    broker,  # noqa: F401  (the module's broker)
    make_topic,
    produce,
)
from tests.integration.test_share_offsets_admin import lags

GROUP_RESOURCE = 32
GROUP_LIMIT = 2
RECORDS = 5


def set_group_config(bootstrap: str, group: str, name: str, value: str) -> int:
    """IncrementalAlterConfigs SET of one group config; the resource's error code."""
    body = {
        "resources": [
            {
                "resource_type": GROUP_RESOURCE,
                "resource_name": group,
                "configs": [{"name": name, "config_operation": 0, "value": value}],
            }
        ],
        "validate_only": False,
    }
    with RawClient(bootstrap) as raw:
        (response,) = raw.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    return int(response["error_code"])


def described(bootstrap: str, group: str) -> dict[str, tuple[str, int]]:
    """name -> (value, config source) of the group's configs by DescribeConfigs v4."""
    body: dict[str, Any] = {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configuration_keys": None}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    with RawClient(bootstrap) as raw:
        (result,) = raw.call(ApiKey.DESCRIBE_CONFIGS, 4, body)["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def test_a_share_groups_delivery_limit_is_its_own(
    broker: BrokerProcess,  # noqa: F811
    tmp_path: Path,
) -> None:
    topic, group, bootstrap = "share-configs", "share-configs-g", broker.bootstrap
    assert GROUP_LIMIT < DELIVERY_LIMIT
    make_topic(bootstrap, topic)
    lines = strom(
        bootstrap,
        "configs",
        "alter",
        "--group",
        group,
        "--add-config",
        f"share.delivery.count.limit={GROUP_LIMIT}",
    )
    assert lines == [f"Completed updating config for group {group}."]
    assert (
        set_group_config(bootstrap, group, "share.record.lock.duration.ms", "1000")
        == ErrorCode.INVALID_CONFIG
    )
    assert set_group_config(bootstrap, group, "share.delivery.count.limit", "11") == ErrorCode.INVALID_CONFIG
    assert set_group_config(bootstrap, group, "share.no.such.config", "1") == ErrorCode.INVALID_CONFIG
    assert (
        set_group_config(bootstrap, group, "share.auto.offset.reset", "sometime") == ErrorCode.INVALID_CONFIG
    )
    configs = described(bootstrap, group)
    assert configs["share.delivery.count.limit"] == (str(GROUP_LIMIT), 8)
    assert configs["share.auto.offset.reset"] == ("earliest", 5)  # the broker's (test_share_groups.CONFIGS)
    shown = strom(bootstrap, "configs", "describe", "--group", group)
    assert shown == [
        f"Dynamic configs for group {group} are:",
        f"  share.delivery.count.limit={GROUP_LIMIT} sensitive=false synonyms={{}}",
    ]

    produce(bootstrap, topic, [f"release-{i}" for i in range(RECORDS)])
    cfg = {"bootstrap": bootstrap, "topics": [topic], "group": group, "mode": "verdicts"}
    consumer = ShareConsumerProcess(tmp_path, "releaser", cfg)
    try:
        # Every record archived: the start offset passes them all, and nothing is left to deliver.
        assert wait_until(lambda: lags(bootstrap, group, topic)[1] == RECORDS, 60), consumer.snapshot()[-5:]
        every = RECORDS * GROUP_LIMIT  # the deliveries the consumer reported before its releases
        assert wait_until(lambda: len(consumer.records()) >= every, 30), consumer.snapshot()[-5:]
        deliveries = Counter(e["o"] for e in consumer.records())
        assert deliveries == Counter(dict.fromkeys(range(RECORDS), GROUP_LIMIT))
        assert max(e["n"] for e in consumer.records()) == GROUP_LIMIT
    finally:
        consumer.kill()


def joined(bootstrap: str, api: ApiKey, version: int, body: dict[str, Any]) -> Any:
    """The answer of a member's first heartbeat (the first group request also creates the offsets
    topic: retried until the coordinator is there, for at most 30 s)."""
    deadline = time.monotonic() + 30
    with RawClient(bootstrap) as raw:
        while (answer := raw.call(api, version, body))["error_code"] != 0:
            assert time.monotonic() < deadline, answer
            time.sleep(0.2)
    return answer


def test_a_groups_own_heartbeat_interval_is_what_its_members_are_told(
    broker: BrokerProcess,  # noqa: F811
) -> None:
    topic, bootstrap = "group-intervals", broker.bootstrap
    share_group, consumer_group = f"share-{uuid.uuid4().hex[:8]}", f"consumer-{uuid.uuid4().hex[:8]}"
    make_topic(bootstrap, topic)
    assert set_group_config(bootstrap, share_group, "share.heartbeat.interval.ms", "7000") == 0
    assert set_group_config(bootstrap, consumer_group, "consumer.heartbeat.interval.ms", "6000") == 0
    assert (
        set_group_config(bootstrap, consumer_group, "consumer.session.timeout.ms", "100")
        == ErrorCode.INVALID_CONFIG
    )
    share = {
        "group_id": share_group,
        "member_id": uuid.uuid4().hex,
        "member_epoch": 0,
        "rack_id": None,
        "subscribed_topic_names": [topic],
    }
    assert joined(bootstrap, ApiKey.SHARE_GROUP_HEARTBEAT, 1, share)["heartbeat_interval_ms"] == 7000
    consumer = join_body(consumer_group, uuid.uuid4().hex, [topic])
    assert joined(bootstrap, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, consumer)["heartbeat_interval_ms"] == 6000
    # Another group is told the broker's (test_share_groups.CONFIGS sets the share one to 500).
    other = {**share, "group_id": f"{share_group}-other", "member_id": uuid.uuid4().hex}
    assert joined(bootstrap, ApiKey.SHARE_GROUP_HEARTBEAT, 1, other)["heartbeat_interval_ms"] == 500
