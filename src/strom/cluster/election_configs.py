"""The two topic configs the controller's elections read, as the partitions' leaders read them.

``min.insync.replicas`` decides which ISR members become eligible leader replicas (KIP-966, see
`strom.cluster.election`): members removed while the ISR is below it hold every acknowledged record
only if the leaders refuse acks=all writes below the *same* value. So the controller resolves it as a
leader does (``strom.broker.control.dynamic_config``): the topic's own value, else the cluster-wide
dynamic default (``/config/brokers/<default>``), else the static default, the controller broker's
properties (every broker's should agree). A per-broker dynamic value would make leaders disagree, so
it is refused, as Kafka refuses it with ELR on. ``unclean.leader.election.enable`` is resolved the
same way.

Before an eligible replica is elected, min.insync.replicas is read again from the store
(`fresh_min_isr`), in case a change not yet notified let the ISR acknowledge without it.
Both are cached per topic for the controller's lifetime: a controlled shutdown elects partition by
partition, and a config read each time would be a ZooKeeper round trip each. `forget` drops a topic's
(or, for a change of the cluster default, every) cached value when a config change notification names
it; the controller then writes the eligible replicas again with the new value (a lowered
min.insync.replicas may make an ISR acknowledge again, and its eligible replicas must go).
Call only from the controller's event loop.
"""

from __future__ import annotations

from strom.cluster.broker_config_znodes import DEFAULT_ENTITY, BrokerConfigZnodes
from strom.cluster.kafka_metadata import KafkaMetadataClient

__all__ = ["ElectionConfigs"]

MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"


class ElectionConfigs:
    def __init__(self, zk: KafkaMetadataClient, min_isr_default: int, unclean_default: bool) -> None:
        self._zk = zk
        self._brokers = BrokerConfigZnodes(zk)
        self._static = {MIN_ISR: str(min_isr_default), UNCLEAN: str(unclean_default).lower()}
        self._cluster: dict[str, str] | None = None
        self._topics: dict[str, dict[str, str]] = {}

    def min_isr(self, topic: str) -> int:
        try:
            return max(1, int(self._value(topic, MIN_ISR)))
        except ValueError:
            return max(1, int(self._static[MIN_ISR]))

    def fresh_min_isr(self, topic: str) -> int:
        """`min_isr` read from the store now (the topic's and the cluster default's), not the cache."""
        self._topics.pop(topic, None)
        self._cluster = None
        return self.min_isr(topic)

    def unclean_allowed(self, topic: str) -> bool:
        return self._value(topic, UNCLEAN).strip().lower() == "true"

    def forget(self, topic: str | None) -> None:
        """A config change notification: ``topic``'s configs changed, or (None) the cluster default."""
        if topic is None:
            self._cluster = None
            self._topics.clear()
        else:
            self._topics.pop(topic, None)

    def clear(self) -> None:
        self.forget(None)

    def _value(self, topic: str, name: str) -> str:
        configs = self._topics.get(topic)
        if configs is None:
            configs = self._topics[topic] = self._zk.get_topic_config(topic)
        if name in configs:
            return configs[name]
        if self._cluster is None:
            self._cluster = self._brokers.read(DEFAULT_ENTITY)
        return self._cluster.get(name, self._static[name])
