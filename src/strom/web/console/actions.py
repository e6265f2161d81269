"""The console's actions: create a topic, add partitions, alter a topic config, delete records, reset a
group's offsets. Each is checked, confirmed, then carried out as the Kafka request a CLI would send.

Theory of operation.

* **Who may.** The console checks the person's own rights with the broker's authorizer, exactly as
  Kafka checks the request the action becomes (`NEEDS`): CreateTopics CREATE on the cluster or the
  topic, CreatePartitions ALTER on the topic, IncrementalAlterConfigs ALTER_CONFIGS on the topic,
  DeleteRecords DELETE on the topic, OffsetCommit READ on the group and on the topic. The request
  itself then goes over the Kafka protocol with this broker's inter-broker login, to the broker Kafka
  would send it to (this broker for topic changes, the partition's leader for DeleteRecords, the group's
  coordinator for OffsetCommit), so every rule of the broker applies unchanged (names, counts, configs,
  the controller's placement, the coordinator's checks).
* **Confirmation.** An action's form posts its fields; the first POST answers a page restating what
  will happen, with a *Confirm* button posting the same fields plus ``confirm=yes``; only that second
  POST acts. A group's offsets are reset only while the group is Empty (or Dead), as Kafka's tools
  require, checked with DescribeGroups at the coordinator just before the commit.
* **CSRF.** Browsers send Basic credentials to any page of the origin on their own, so every POST
  must carry ``csrf``: an HMAC of the principal under a secret drawn when the broker starts, which only
  pages of this origin can read (the same-origin policy); a POST whose ``Origin`` header names another
  origin is refused too. GET never changes anything.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass

from strom.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from strom.broker.broker import Broker
from strom.broker.network.net_client import BrokerConnection
from strom.protocol.api import ApiKey
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterableConfig,
    OffsetCommitRequest,
)
from strom.web.console.remote import LeaderReads, RemoteReadError, RemoteSource

TIMEOUT_MS = 30_000
TOPIC_RESOURCE = 2  # ConfigResource type of a topic
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
ACTIONS = ("create-topic", "add-partitions", "alter-config", "delete-records", "reset-offsets")
EMPTY_STATES = ("Empty", "Dead")


class ActionError(Exception):
    """Why an action was not carried out (shown on the result page)."""


@dataclass(frozen=True, slots=True)
class Need:
    operation: AclOperation
    resource_type: ResourceType
    name: str


def needs(action: str, fields: Mapping[str, str]) -> list[list[Need]]:
    """The rights an action needs: every inner list is alternatives (one of them suffices)."""
    topic, group = fields.get("topic", ""), fields.get("group", "")
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    if action == "create-topic":
        return [
            [
                Need(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME),
                Need(AclOperation.CREATE, T, topic),
            ]
        ]
    if action == "add-partitions":
        return [[Need(AclOperation.ALTER, T, topic)]]
    if action == "alter-config":
        return [[Need(AclOperation.ALTER_CONFIGS, T, topic)]]
    if action == "delete-records":
        return [[Need(AclOperation.DELETE, T, topic)]]
    if action == "reset-offsets":
        return [[Need(AclOperation.READ, G, group)], [Need(AclOperation.READ, T, topic)]]
    raise ActionError(f"no action {action!r}")


class CsrfTokens:
    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or os.urandom(32)

    def token(self, principal: str) -> str:
        return hmac.new(self._secret, principal.encode(), hashlib.sha256).hexdigest()

    def valid(self, principal: str, token: str) -> bool:
        return hmac.compare_digest(self.token(principal), token)


def _int(fields: Mapping[str, str], name: str) -> int:
    try:
        return int(fields.get(name, "").strip())
    except ValueError:
        raise ActionError(f"{name} must be a whole number") from None


def describe(action: str, fields: Mapping[str, str]) -> str:
    """What the action will do, in a sentence for the confirmation page.

    Raises:
        ActionError: fields that cannot be read.
    """
    topic, group = fields.get("topic", ""), fields.get("group", "")
    if action == "create-topic":
        configs = configs_of(fields.get("configs", ""))
        shown = ", ".join(f"{k}={v}" for k, v in configs.items()) or "broker defaults"
        return (
            f"Create topic {topic!r} with {_int(fields, 'partitions')} partitions, replication factor "
            f"{_int(fields, 'replication_factor')}, configs: {shown}."
        )
    if action == "add-partitions":
        count = _int(fields, "count")
        return f"Grow topic {topic!r} to {count} partitions (partitions cannot be removed later)."
    if action == "alter-config":
        name, value = fields.get("name", ""), fields.get("value", "")
        if not value:
            return f"Remove the override of {name!r} on topic {topic!r} (the broker default applies)."
        return f"Set {name!r} = {value!r} on topic {topic!r}."
    if action == "delete-records":
        return (
            f"Delete the records of {topic}-{_int(fields, 'partition')} below offset "
            f"{_int(fields, 'offset')} "
            "(the log start offset moves up; this cannot be undone)."
        )
    if action == "reset-offsets":
        return (
            f"Reset group {group!r}'s committed offsets on every partition of {topic!r} to "
            f"{_reset_target(fields)} (the group must be empty)."
        )
    raise ActionError(f"no action {action!r}")


def _reset_target(fields: Mapping[str, str]) -> str:
    to = fields.get("to", "earliest")
    if to in ("earliest", "latest"):
        return f"the {to} offset"
    if to == "offset":
        return f"offset {_int(fields, 'offset')}"
    raise ActionError(f"reset to {to!r}: earliest, latest or offset")


def configs_of(text: str) -> dict[str, str]:
    """``a=1, b=2`` (commas or new lines) → {"a": "1", "b": "2"}."""
    out: dict[str, str] = {}
    for item in text.replace("\n", ",").split(","):
        if item.strip():
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ActionError(f"config {item.strip()!r} is not name=value")
            out[name.strip()] = value.strip()
    return out


class ActionRunner:
    """Carries an action out as Kafka requests (see the module's docstring)."""

    def __init__(self, broker: Broker, reads: LeaderReads) -> None:
        self._broker = broker
        self._reads = reads
        self._self: BrokerConnection | None = None

    def close(self) -> None:
        if self._self is not None:
            self._self.close()

    def _own(self) -> BrokerConnection:
        if self._self is None:
            address = self._broker.advertised
            self._self = BrokerConnection(
                address.host, address.port, f"console-{self._broker.node_id}",
                self._broker.inter_broker_security, self._broker.clock,
            )  # fmt: skip
        return self._self

    async def run(self, action: str, fields: Mapping[str, str]) -> str:
        """Carry the action out; returns what was done.

        Raises:
            ActionError: the broker refused (its error code and message), or the fields are wrong.
        """
        topic = fields.get("topic", "")
        try:
            if action == "create-topic":
                return await self._create(topic, fields)
            if action == "add-partitions":
                return await self._grow(topic, _int(fields, "count"))
            if action == "alter-config":
                return await self._alter(topic, fields.get("name", "").strip(), fields.get("value", ""))
            if action == "delete-records":
                return await self._delete_records(topic, _int(fields, "partition"), _int(fields, "offset"))
            if action == "reset-offsets":
                return await self._reset(fields.get("group", ""), topic, fields)
        except (ConnectionError, RemoteReadError) as exc:
            raise ActionError(f"could not reach the broker: {exc}") from None
        raise ActionError(f"no action {action!r}")

    async def _create(self, topic: str, fields: Mapping[str, str]) -> str:
        configs = configs_of(fields.get("configs", ""))
        body: CreateTopicsRequest = {
            "topics": [
                {"name": topic, "num_partitions": _int(fields, "partitions"),
                 "replication_factor": _int(fields, "replication_factor"), "assignments": [],
                 "configs": [{"name": k, "value": v} for k, v in configs.items()]}
            ],
            "timeout_ms": TIMEOUT_MS,
            "validate_only": False,
        }  # fmt: skip
        answer = await self._own().send(ApiKey.CREATE_TOPICS, 4, body, timeout_ms=TIMEOUT_MS + 5000)
        result = answer["topics"][0]
        _check(result["error_code"], result.get("error_message"))
        return f"Topic {topic!r} created."

    async def _grow(self, topic: str, count: int) -> str:
        body: CreatePartitionsRequest = {
            "topics": [{"name": topic, "count": count, "assignments": None}],
            "timeout_ms": TIMEOUT_MS,
            "validate_only": False,
        }
        answer = await self._own().send(ApiKey.CREATE_PARTITIONS, 1, body, timeout_ms=TIMEOUT_MS + 5000)
        result = answer["results"][0]
        _check(result["error_code"], result["error_message"])
        return f"Topic {topic!r} now has {count} partitions."

    async def _alter(self, topic: str, name: str, value: str) -> str:
        if not name:
            raise ActionError("a config name is needed")
        change: IncrementalAlterConfigsRequestAlterableConfig = {
            "name": name,
            "config_operation": SET if value else DELETE,
            "value": value or None,
        }
        body: IncrementalAlterConfigsRequest = {
            "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": [change]}],
            "validate_only": False,
        }  # fmt: skip
        answer = await self._own().send(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body, timeout_ms=TIMEOUT_MS)
        result = answer["responses"][0]
        _check(result["error_code"], result["error_message"])
        return f"{name} = {value} on {topic!r}." if value else f"{name} on {topic!r} back to the default."

    async def _delete_records(self, topic: str, index: int, offset: int) -> str:
        body: DeleteRecordsRequest = {
            "topics": [{"name": topic, "partitions": [{"partition_index": index, "offset": offset}]}],
            "timeout_ms": TIMEOUT_MS,
        }
        conn = self._reads.connection(topic, index)
        answer = await conn.send(ApiKey.DELETE_RECORDS, 1, body, timeout_ms=TIMEOUT_MS + 5000)
        result = answer["topics"][0]["partitions"][0]
        _check(result["error_code"], None)
        return f"{topic}-{index} now starts at offset {result['low_watermark']}."

    async def _coordinator(self, group: str) -> BrokerConnection:
        body: FindCoordinatorRequest = {"key": group, "key_type": 0}
        found = await self._own().send(ApiKey.FIND_COORDINATOR, 2, body, timeout_ms=TIMEOUT_MS)
        _check(found["error_code"], found.get("error_message"))
        if found["node_id"] == self._broker.node_id:
            return self._own()
        return self._reads.broker_connection(found["node_id"], found["host"], found["port"])

    async def _reset(self, group: str, topic: str, fields: Mapping[str, str]) -> str:
        target = _reset_target(fields)
        conn = await self._coordinator(group)
        describe_body: DescribeGroupsRequest = {"groups": [group], "include_authorized_operations": False}
        described = await conn.send(ApiKey.DESCRIBE_GROUPS, 4, describe_body, timeout_ms=TIMEOUT_MS)
        state = described["groups"][0]
        _check(state["error_code"], None)
        if state["group_state"] not in EMPTY_STATES:
            raise ActionError(
                f"group {group!r} is {state['group_state']} with {len(state['members'])} members: stop its "
                "consumers first (Kafka resets only an empty group's offsets)"
            )
        offsets = await self._offsets(topic, fields.get("to", "earliest"), fields)
        body: OffsetCommitRequest = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {"name": topic, "partitions": [
                    {"partition_index": i, "committed_offset": o, "committed_leader_epoch": -1,
                     "committed_metadata": ""} for i, o in sorted(offsets.items())]}
            ],
        }  # fmt: skip
        answer = await conn.send(ApiKey.OFFSET_COMMIT, 7, body, timeout_ms=TIMEOUT_MS)
        for part in answer["topics"][0]["partitions"]:
            _check(part["error_code"], f"partition {part['partition_index']}")
        shown = ", ".join(f"{i}: {o}" for i, o in sorted(offsets.items()))
        return f"Group {group!r} on {topic!r} reset to {target} ({shown})."

    async def _offsets(self, topic: str, to: str, fields: Mapping[str, str]) -> dict[int, int]:
        info = self._broker.metadata.topics.get(topic)
        if info is None:
            raise ActionError(f"topic {topic!r} does not exist")
        if to == "offset":
            return dict.fromkeys(range(info.partitions), _int(fields, "offset"))
        out = {}
        for index in range(info.partitions):
            start, end = await RemoteSource(self._reads, topic, index).bounds()
            out[index] = start if to == "earliest" else end
        return out


def _check(code: int, message: str | None) -> None:
    if code:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        raise ActionError(name + (f": {message}" if message else ""))
