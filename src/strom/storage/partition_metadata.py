"""``partition.metadata``: the topic id a partition directory belongs to (Kafka's PartitionMetadataFile).

Each partition directory holds one, written when the partition's first LeaderAndIsr names its topic
id (KIP-516)::

    version: 0
    topic_id: <the id in Kafka's text form, strom.protocol.uuid_text>

A directory whose file names another id than the controller's belongs to a deleted topic of the same
name: the broker refuses to use it (INCONSISTENT_TOPIC_ID) rather than serve the old topic's records as
the new one's. A directory without the file (written before topic ids) takes the id it is given.
Written like the checkpoints: to a temporary file, fsynced, renamed.
"""

from __future__ import annotations

import os

from strom.protocol.uuid_text import parse_uuid, uuid_text
from strom.storage.checkpoint import write_atomically

__all__ = ["PARTITION_METADATA", "read_topic_id", "write_topic_id"]

PARTITION_METADATA = "partition.metadata"
_VERSION = 0


def read_topic_id(partition_dir: str) -> bytes | None:
    """The topic id recorded in ``partition_dir``; None without a file or with one that does not parse
    (then it is written again)."""
    try:
        with open(os.path.join(partition_dir, PARTITION_METADATA), encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        if int(fields["version"]) != _VERSION:
            return None
        return parse_uuid(fields["topic_id"])
    except (OSError, KeyError, ValueError):
        return None


def write_topic_id(partition_dir: str, topic_id: bytes, durable: bool = True) -> None:
    write_atomically(
        os.path.join(partition_dir, PARTITION_METADATA),
        f"version: {_VERSION}\ntopic_id: {uuid_text(topic_id)}\n",
        durable,
    )
