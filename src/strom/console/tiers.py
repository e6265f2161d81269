"""The local and remote parts of tiered partitions, for ``strom topics describe`` (KIP-405).

A tiered partition's log is a remote part (in object storage) followed by a local part (on the leader's
disk); they may overlap, since local retention deletes a segment only once it is remote. Both ranges
come from the leader through ListOffsets: the log start (earliest, -2, the remote log's start once
anything is remote), the local log start (EARLIEST_LOCAL_TIMESTAMP, -4, v8+), the highest offset in
remote storage (LATEST_TIERED_TIMESTAMP, -5, v9+, -1 while nothing is remote) and the log end (latest,
-1); the local size is the leader's replica's, from DescribeLogDirs. Kafka reports no remote size in
any API (the broker's ``RemoteLogSizeBytes`` metric has it per topic): the remote size is summed from
the segments recorded in ``__remote_log_metadata`` (strom.console.remote_sizes). confluent-kafka's admin
client has no -4/-5, so this uses kafka-python's (strom.console.kafka_admin).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypedDict

from confluent_kafka import KafkaException
from kafka.admin import OffsetSpec
from kafka.structs import TopicPartition

from strom.broker.tiered.config_defs import METADATA_TOPIC
from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_admin import admin_call, kafka_admin
from strom.console.remote_sizes import remote_sizes
from strom.protocol.uuid_text import uuid_text

_SPECS = {
    "log_start": OffsetSpec.EARLIEST,
    "local_log_start": OffsetSpec.EARLIEST_LOCAL,
    "highest_remote": OffsetSpec.LATEST_TIERED,
    "log_end": OffsetSpec.LATEST,
}


class _DescribedTopic(TypedDict):
    """The fields read from one topic of kafka-python's ``describe_topics`` (a Metadata response topic)."""

    name: str
    topic_id: object  # a UUID (or its text); absent or None when the topic has none
    partitions: list[object] | None


@dataclass(frozen=True, slots=True)
class PartitionTiers:
    log_start: int
    local_log_start: int
    highest_remote: int  # -1: nothing remote
    log_end: int
    local_bytes: int  # -1: the leader did not report it
    remote_bytes: int  # of the copied segments recorded in __remote_log_metadata; -1: not readable

    def fields(self) -> str:
        """The tab-separated fields ``strom topics describe`` appends to a tiered partition's line."""
        remote = f"[{self.log_start}, {self.highest_remote + 1})" if self.highest_remote >= 0 else "none"
        local = f"[{self.local_log_start}, {self.log_end})"
        size = f"\tLocalBytes: {self.local_bytes}" if self.local_bytes >= 0 else ""
        size += f"\tRemoteBytes: {self.remote_bytes}" if self.remote_bytes >= 0 else ""
        return f"\tRemote: {remote}\tLocal: {local}{size}"


def partition_tiers(
    options: ClientOptions, partitions: Mapping[str, Sequence[tuple[int, int]]]
) -> dict[tuple[str, int], PartitionTiers]:
    """Each (topic, partition)'s tiers; ``partitions`` maps a topic to its (partition, leader) pairs."""
    wanted = [TopicPartition(t, p) for t, ps in partitions.items() for p, _ in ps]
    if not wanted:
        return {}
    found: dict[str, dict[TopicPartition, int]] = {}
    with kafka_admin(options, "topics describe") as admin:
        for name, spec in _SPECS.items():
            answer = admin_call(
                options, "cannot list the offsets of tiered partitions", partial(_list, admin, wanted, spec)
            )
            found[name] = {tp: int(result.offset) for tp, result in answer.items()}
        leaders = sorted({leader for ps in partitions.values() for _, leader in ps if leader >= 0})
        dirs: list[dict[str, Any]] = admin_call(
            options,
            "cannot describe log dirs",
            lambda: admin.describe_log_dirs(list(partitions), brokers=leaders),
        )
        names = [*partitions, METADATA_TOPIC] if METADATA_TOPIC in admin.list_topics() else list(partitions)
        described: list[_DescribedTopic] = admin_call(
            options, "cannot describe topics", lambda: admin.describe_topics(names)
        )
    ids = {str(t["name"]): _id_text(t["topic_id"]) for t in described if t.get("topic_id")}
    metadata_partitions = sum(
        len(t.get("partitions") or []) for t in described if t["name"] == METADATA_TOPIC
    )
    try:
        remote = remote_sizes(options, [(tp.topic, tp.partition) for tp in wanted], ids, metadata_partitions)
    except (ConsoleError, KafkaException):
        remote = {}  # e.g. no READ on the metadata topic: the rest of the line still holds

    sizes = _leader_sizes(dirs, partitions)
    return {
        (tp.topic, tp.partition): PartitionTiers(
            found["log_start"].get(tp, -1),
            found["local_log_start"].get(tp, -1),
            found["highest_remote"].get(tp, -1),
            found["log_end"].get(tp, -1),
            sizes.get((tp.topic, tp.partition), -1),
            remote.get((tp.topic, tp.partition), -1),
        )
        for tp in wanted
    }


def _id_text(topic_id: object) -> str:
    """A topic id as kafka-python gives it (a UUID, or its text), in Kafka's text form (the records')."""
    if isinstance(topic_id, uuid.UUID):
        return uuid_text(topic_id.bytes)
    try:
        return uuid_text(uuid.UUID(str(topic_id)).bytes)
    except ValueError:
        return str(topic_id)  # already Kafka's form


def _list(admin: Any, wanted: list[TopicPartition], spec: OffsetSpec) -> dict[TopicPartition, Any]:
    answer: dict[TopicPartition, Any] = admin.list_partition_offsets(dict.fromkeys(wanted, spec))
    return answer


def _leader_sizes(
    dirs: list[dict[str, Any]], partitions: Mapping[str, Sequence[tuple[int, int]]]
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the size of its leader's replica, summed over that broker's log dirs."""
    leader_of = {(t, p): leader for t, ps in partitions.items() for p, leader in ps}
    sizes: dict[tuple[str, int], int] = {}
    for answer in dirs:
        for log_dir in answer["log_dirs"]:
            for topic in log_dir.get("topics", []):
                for p in topic.get("partitions", []):
                    key = (str(topic["name"]), int(p["partition_index"]))
                    if leader_of.get(key) == answer["broker"]:
                        sizes[key] = sizes.get(key, 0) + int(p["partition_size"])
    return sizes


__all__ = ["PartitionTiers", "partition_tiers"]
