"""KIP-516's upgrade of topics made before topic ids: the controller gives such a topic an id when it
loads it, before any broker hears of it (Kafka's controller does the same). The id is written into the
topic's assignment znode with a conditional write; one that loses to another writer keeps the zero id,
and the watch on the znode reloads the topic with the winner's id."""

from __future__ import annotations

import logging

from strom.cluster.context import ControllerContext
from strom.cluster.kafka_metadata import KafkaMetadataClient
from strom.protocol.uuid_text import ZERO_UUID, new_uuid, uuid_text

log = logging.getLogger("strom.cluster.controller")

__all__ = ["assign_topic_ids"]


def assign_topic_ids(ctx: ControllerContext, zk: KafkaMetadataClient, topics: list[str]) -> None:
    """Give each of ``topics`` whose znode has no id a new one (ids already there are kept)."""
    for topic in topics:
        assignment = ctx.assignments.get(topic)
        if assignment is None or assignment.topic_id != ZERO_UUID:
            continue
        assignment.topic_id = new_uuid()
        version = zk.set_topic_assignment(topic, assignment, ctx.assignment_versions[topic])
        if version is None:
            assignment.topic_id = ZERO_UUID
        else:
            ctx.assignment_versions[topic] = version
            log.info("topic %s had no topic id; it is %s now", topic, uuid_text(assignment.topic_id))
