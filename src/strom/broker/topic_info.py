"""`TopicInfo`: a topic as the metadata cache, the topic rules and the control planes see it.

The topic's authoritative record lives in the metadata store (`strom.cluster.metadata_store`:
ZooKeeper in a cluster, the local store in the first log dir on a single node); this is the broker's
in-memory view of it, shared by the caches and the handlers.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: bytes
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    leader_epoch: int = 0
