"""What newer Produce and Fetch versions add around the data path: topics by id, and where the leader went.

Topics by id (KIP-516). From Fetch v13 and Produce v13 a request names each topic by its topic id
only, and the response answers by id. The handlers resolve the ids through the metadata cache first
and serve the rest of the request by name, as before; a topic id no topic has answers UNKNOWN_TOPIC_ID
for each of its partitions (Kafka's answer too, which makes clients refresh their metadata).

New leaders in errors (KIP-951). From Produce v10 and Fetch v16 a partition answered
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH also carries ``current_leader`` (the leader's id and
epoch as this broker's metadata cache knows them), and the response lists that leader's address in
``node_endpoints``, so the client retries at the new leader without a Metadata round trip. A partition
whose leader this broker does not know carries nothing (the client refreshes its metadata as before).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from strom.broker.metadata_cache import ClusterMetadataStore
from strom.protocol.errors import ErrorCode

__all__ = ["LEADER_MOVED", "LeaderHint", "NodeEndpoint", "leader_hint", "node_endpoints"]

# The errors after which a client looks for the partition's new leader.
LEADER_MOVED = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH)})


class LeaderHint(TypedDict):
    """Produce's and Fetch's ``LeaderIdAndEpoch``."""

    leader_id: int
    leader_epoch: int


class NodeEndpoint(TypedDict):
    """Produce's and Fetch's ``NodeEndpoint``."""

    node_id: int
    host: str
    port: int
    rack: str | None


def leader_hint(cache: ClusterMetadataStore, topic: str, partition: int) -> LeaderHint | None:
    """The partition's leader and epoch as the cache knows them, if it knows a live one."""
    meta = cache.partitions.get((topic, partition))
    if meta is None or meta.leader < 0 or meta.leader not in cache.brokers:
        return None
    return {"leader_id": meta.leader, "leader_epoch": meta.leader_epoch}


def node_endpoints(cache: ClusterMetadataStore, node_ids: Iterable[int], listener: str) -> list[NodeEndpoint]:
    """The addresses of these brokers on the client's listener (those without it are left out)."""
    out: list[NodeEndpoint] = []
    for node_id in sorted(set(node_ids)):
        live = cache.brokers.get(node_id)
        endpoint = None if live is None else live.endpoint(listener)
        if live is not None and endpoint is not None:
            out.append({"node_id": node_id, "host": endpoint[0], "port": endpoint[1], "rack": live.rack})
    return out
