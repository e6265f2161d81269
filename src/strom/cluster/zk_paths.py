"""Every znode Strom uses, with the JSON stored in it: one catalogue, encode and decode side by side.

The layout follows Kafka's ZooKeeper mode (2.x/3.x) so its documentation maps onto ours:

| path | kind | content |
|---|---|---|
| ``/cluster/id`` | persistent | ``{"version": "1", "id": cluster id}`` |
| ``/brokers/ids/<id>`` | ephemeral | ``{"version": 5, "host", "port", "rack", "endpoints",
  "timestamp"}`` |
| ``/controller`` | ephemeral | ``{"version": 1, "brokerid": id, "timestamp": ms}``: who is the controller |
| ``/controller_epoch`` | persistent | the controller epoch as a decimal string; +1 at every election |
| ``/brokers/topics/<topic>`` | persistent | ``{"version": 3, "topic_id", "partitions": {"<p>": [replicas]},
  "adding_replicas": {...}, "removing_replicas": {...}}``: the assignment; reassignments in flight are
  the two extra maps (KIP-455); the topic id (KIP-516) in Kafka's text form (strom.protocol.uuid_text) |
| ``/brokers/topics/<t>/partitions/<p>/state`` | persistent | ``{"version": 1, "leader",
  "leader_epoch", "isr", "controller_epoch"}`` |
| ``/config/topics/<topic>`` | persistent | ``{"version": 1, "config": {name: value}}`` |
| ``/config/users/<user>`` | persistent | ``{"version": 1, "config": {"SCRAM-SHA-256": "salt=..."}}``
  (and the user's quotas) |
| ``/config/users/<user>/clients/<client>``, ``/config/clients/<client>`` | persistent | ``{"version": 1,
  "config": {"producer_byte_rate": "1024"}}``: client quotas (cluster/quota_znodes.py; ``<default>``
  names a default entity) |
| ``/config/changes/config_change_<seq>`` | persistent sequential | ``{"version": 2, "entity_path":
  "topics/<t>"}``: every broker reloads that topic's configs |
| ``/admin/delete_topics/<topic>`` | persistent | empty: deletion requested, the controller carries it out |
| ``/isr_change_notification/isr_change_<seq>`` | persistent sequential | ``{"version": 1, "partitions":
  [{"topic", "partition"}]}``: a leader changed ISRs; the controller re-reads them and tells brokers |
| ``/log_dir_event_notification/log_dir_event_<seq>`` | persistent sequential | ``{"version": 1,
  "broker": id, "event": 1, "partitions": [{"topic", "partition"}]}``: a log dir of that broker went
  offline (event 1, Kafka's LogDirFailure) with these replicas (Strom names them: Kafka's controller
  asks the broker with a LeaderAndIsr instead); the controller moves their leadership and ISRs |
| ``/latest_producer_id_block`` | persistent | ``{"version": 1, "broker", "block_start", "block_end"}`` |
| ``/strom/broker_epochs`` | persistent | ``{"version": 1, "epochs": {"<id>": epoch}}`` (Strom's own): the
  registration (broker epoch) of each live broker that the active controller has taken in; a new
  controller treats a broker registered since as one that failed and started again |

Topic assignment and partition state znodes are changed only by conditional writes on the version the
writer read (``set(path, data, version)``): two writers can never both win.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict, TypeVar, cast

from strom._util.json_types import JsonValue
from strom.protocol.uuid_text import ZERO_UUID, parse_uuid, uuid_text

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_USERS = "/config/users"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_FAILURE_EVENT = 1  # Kafka's LogDirEventNotificationHandler.LogDirFailureEvent
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
BROKER_EPOCHS = "/strom/broker_epochs"
PERSISTENT_PATHS = (
    "/cluster",
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def encode_broker_epochs(epochs: Mapping[int, int]) -> bytes:
    return _dumps({"version": 1, "epochs": {str(b): e for b, e in sorted(epochs.items())}})


def decode_broker_epochs(data: bytes) -> dict[int, int]:
    doc = json.loads(data)
    return {int(b): int(e) for b, e in doc.get("epochs", {}).items()}


def _dumps(doc: Mapping[str, JsonValue]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


# The fields of each znode that its decoder reads (the table above gives the whole documents).
class BrokerZnode(TypedDict):
    version: int
    host: str
    port: int
    rack: NotRequired[str | None]
    endpoints: NotRequired[list[str]]
    listener_security_protocol_map: NotRequired[dict[str, str]]
    previous_broker_epoch: NotRequired[int]
    previous_broker_epochs: NotRequired[list[int]]


class ControllerZnode(TypedDict):
    brokerid: int


class TopicZnode(TypedDict):
    topic_id: NotRequired[str | None]
    partitions: NotRequired[dict[str, list[int]]]
    adding_replicas: NotRequired[dict[str, list[int]]]
    removing_replicas: NotRequired[dict[str, list[int]]]


class PartitionStateZnode(TypedDict):
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    eligible_leader_replicas: NotRequired[list[list[int]]]
    restarted_replicas: NotRequired[list[int]]


class ConfigZnode(TypedDict):
    config: NotRequired[dict[str, str]]


class ChangeNotificationZnode(TypedDict):
    entity_path: NotRequired[str]


class IsrChangeEntry(TypedDict):
    topic: str
    partition: int


class IsrChangeZnode(TypedDict):
    partitions: NotRequired[list[IsrChangeEntry]]


class LogDirEventZnode(TypedDict):
    broker: int
    event: NotRequired[int]
    partitions: NotRequired[list[IsrChangeEntry]]


class ProducerIdBlockZnode(TypedDict):
    block_end: str


class ClusterIdZnode(TypedDict):
    id: str


_Doc = TypeVar("_Doc")


def _loads(data: bytes, shape: type[_Doc]) -> _Doc:
    """The znode's JSON object, read as ``shape``; decoders still convert values with ``int``/``str``,
    as a znode written by another implementation may differ in detail."""
    doc = json.loads(data.decode() or "{}")
    if not isinstance(doc, dict):
        raise ValueError("znode content is not a JSON object")
    return cast(_Doc, doc)


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    rack: str | None
    epoch: int = 0  # czxid of the ephemeral znode: changes when the broker re-registers (a bounce)
    # Every listener as (name, security protocol, advertised host, port); host/port above are the
    # inter-broker listener's. Empty: one PLAINTEXT listener at host:port.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    protocols: tuple[tuple[str, str], ...] = ()  # listener name -> security protocol
    # The epochs of the registrations this one replaces when the same process registers again after
    # its session expired (KIP-966's PreviousBrokerEpoch), latest last: its log is whole. Empty from a
    # new process. All of them (a bounded few), not only the last: a controller may have seen any one.
    previous_epochs: tuple[int, ...] = ()

    def listener_endpoints(self) -> tuple[tuple[str, str, int], ...]:
        return self.endpoints or (("PLAINTEXT", self.host, self.port),)

    def encode(self) -> bytes:
        return _dumps(
            {
                "version": 5,
                "host": self.host,
                "port": self.port,
                "rack": self.rack,
                "endpoints": [f"{name}://{host}:{port}" for name, host, port in self.listener_endpoints()],
                "listener_security_protocol_map": dict(self.protocols or (("PLAINTEXT", "PLAINTEXT"),)),
                "jmx_port": -1,
                "previous_broker_epoch": self.previous_epochs[-1] if self.previous_epochs else -1,
                "previous_broker_epochs": list(self.previous_epochs),
                "timestamp": str(int(time.time() * 1000)),
            }
        )

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        doc = _loads(data, BrokerZnode)
        endpoints = []
        for text in doc.get("endpoints") or ():
            name, _, rest = str(text).partition("://")
            host, _, port = rest.rpartition(":")
            endpoints.append((name, host.strip("[]"), int(port)))
        protocols = tuple(sorted((doc.get("listener_security_protocol_map") or {}).items()))
        return cls(
            broker_id,
            str(doc["host"]),
            int(doc["port"]),
            doc.get("rack"),
            0,
            tuple(endpoints),
            protocols,
            _previous_epochs(doc),
        )


def _previous_epochs(doc: BrokerZnode) -> tuple[int, ...]:
    if "previous_broker_epochs" in doc:
        return tuple(int(e) for e in doc["previous_broker_epochs"])
    last = int(doc.get("previous_broker_epoch", -1))
    return (last,) if last >= 0 else ()


def encode_controller(broker_id: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))})


def decode_controller(data: bytes) -> int:
    return int(_loads(data, ControllerZnode)["brokerid"])


def _topic_id(text: str | None) -> bytes:
    """A topic znode's id: Kafka's text form (older Strom wrote hex); none (a topic made before topic
    ids) is the zero id, which the controller replaces (`strom.cluster.topic_ids`)."""
    return ZERO_UUID if not text else parse_uuid(text)


@dataclass(slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: replicas per partition, plus reassignments in flight (KIP-455)."""

    topic_id: bytes
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def text_keys(m: dict[int, list[int]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(m.items())}

        return _dumps(
            {
                "version": 3,
                "topic_id": uuid_text(self.topic_id),
                "partitions": text_keys(self.partitions),
                "adding_replicas": text_keys(self.adding_replicas),
                "removing_replicas": text_keys(self.removing_replicas),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicAssignment:
        doc = _loads(data, TopicZnode)

        def int_keys(m: dict[str, list[int]] | None) -> dict[int, list[int]]:
            return {int(p): [int(b) for b in r] for p, r in (m or {}).items()}

        return cls(
            _topic_id(doc.get("topic_id")),
            # A topic znode without an assignment (the parent of a partition-state znode written
            # first, or a tool's empty node) is a topic without partitions, not a broken event.
            int_keys(doc.get("partitions")),
            int_keys(doc.get("adding_replicas")),
            int_keys(doc.get("removing_replicas")),
        )


@dataclass(frozen=True, slots=True)
class PartitionStateDoc:
    """``.../partitions/<p>/state``: leader, leader epoch, ISR and the controller epoch of the writer,
    and Strom's ``eligible_leader_replicas`` as [broker, broker epoch] pairs (KIP-966) and, while it
    has no leader, ``restarted_replicas``, the ISR members seen restarted since (strom.cluster.election);
    each written only when there are some, so the node reads as Kafka's otherwise."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    elr: tuple[tuple[int, int], ...] = ()
    restarted: tuple[int, ...] = ()

    def encode(self) -> bytes:
        doc: dict[str, JsonValue] = {
            "version": 1,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "controller_epoch": self.controller_epoch,
        }
        if self.elr:
            doc["eligible_leader_replicas"] = [[b, e] for b, e in self.elr]
        if self.restarted:
            doc["restarted_replicas"] = list(self.restarted)
        return _dumps(doc)

    @classmethod
    def decode(cls, data: bytes) -> PartitionStateDoc:
        doc = _loads(data, PartitionStateZnode)
        return cls(
            int(doc["leader"]),
            int(doc["leader_epoch"]),
            tuple(int(b) for b in doc["isr"]),
            int(doc["controller_epoch"]),
            tuple((int(b), int(e)) for b, e in doc.get("eligible_leader_replicas") or ()),
            tuple(int(b) for b in doc.get("restarted_replicas") or ()),
        )


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(configs)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in _loads(data, ConfigZnode).get("config", {}).items()}


def encode_config_change(topic: str) -> bytes:
    return _dumps({"version": 2, "entity_path": f"topics/{topic}"})


def user_config_path(user: str) -> str:
    """``/config/users/<URL-encoded user>`` (SCRAM credentials and quotas share its config map)."""
    return f"{CONFIG_USERS}/{urllib.parse.quote(user, safe='')}"


def encode_user_change(user: str) -> bytes:
    return _dumps({"version": 2, "entity_path": f"users/{urllib.parse.quote(user, safe='')}"})


def encode_entity_change(entity_path: str) -> bytes:
    """A change notification for any config entity below ``/config`` (``clients/<c>``, ...)."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_user_change(data: bytes) -> str | None:
    """The user named by a config change notification, or None if it is about something else."""
    entity = str(_loads(data, ChangeNotificationZnode).get("entity_path", ""))
    kind, _, name = entity.partition("/")
    return urllib.parse.unquote(name) if kind == "users" and name else None


def decode_config_change(data: bytes) -> str | None:
    entity = str(_loads(data, ChangeNotificationZnode).get("entity_path", ""))
    kind, _, name = entity.partition("/")
    return name if kind == "topics" and name else None


def encode_isr_change(partitions: list[tuple[str, int]]) -> bytes:
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_isr_change(data: bytes) -> list[tuple[str, int]]:
    return [
        (str(e["topic"]), int(e["partition"])) for e in _loads(data, IsrChangeZnode).get("partitions", [])
    ]


def encode_log_dir_failure(broker_id: int, partitions: list[tuple[str, int]]) -> bytes:
    entries: list[JsonValue] = [{"topic": t, "partition": p} for t, p in partitions]
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT, "partitions": entries})


def decode_log_dir_failure(data: bytes) -> tuple[int, list[tuple[str, int]]] | None:
    """(broker, its replicas in the failed dir) of a log dir failure event; None for another event."""
    znode = _loads(data, LogDirEventZnode)
    if int(znode.get("event", LOG_DIR_FAILURE_EVENT)) != LOG_DIR_FAILURE_EVENT:
        return None
    return int(znode["broker"]), [(str(e["topic"]), int(e["partition"])) for e in znode.get("partitions", [])]


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block_end(data: bytes) -> int:
    return int(_loads(data, ProducerIdBlockZnode)["block_end"]) if data else -1


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_loads(data, ClusterIdZnode)["id"])
