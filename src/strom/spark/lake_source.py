"""The driver's side of a read across Iceberg tables and logs: which topics are Iceberg topics, the table
snapshots a plan pins, and the table tasks it makes (the seam arithmetic is in `lake_plan`).

Theory of operation
-------------------
For the topics a plan covers, the driver asks the brokers once (DescribeConfigs) for each topic's
``strom.iceberg.mode`` and ``message.timestamp.type`` (the table keeps a record's timestamp but not its
type: the topic's setting supplies ``timestampType``). For every Iceberg topic it pins the table
(strom.lake.history.pin): the snapshot and the next offsets (the seams) this plan reads, plus the
dead-letter table's snapshot for ``value_schema_id_prefix`` topics, whose undecodable records are there
and not in the topic table. A pin names the tables by uuid: the tasks read only those, and a later plan
of the same reader (a streaming query's next micro-batch) that finds another table under the topic's
name -- the topic deleted and created again, its offsets started over -- fails with
`history.TableChanged` rather than read the new topic's rows at the old one's offsets. Each table
range becomes a `TableRange` task, read on an executor by `lake_rows`; log ranges stay the ordinary
tasks of `reader`.

Clients: one lazily opened AdminClient, dropped when the owner is pickled; catalogs are opened by
strom.lake.history, once per process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]
from pyspark.sql.datasource import InputPartition

from strom.lake import history
from strom.lake.translate import VALUE_SCHEMA_ID_PREFIX
from strom.spark.errors import KafkaOptionError
from strom.spark.lake_plan import LakeOptions
from strom.spark.planning import OffsetRange
from strom.spark.progress import BatchTiming
from strom.spark.typed_plan import TypedRead

MODE_CONFIG = "strom.iceberg.mode"
DISABLED = "disabled"
_TIMESTAMP_TYPES = {"CreateTime": 0, "LogAppendTime": 1}
_REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TopicLake:
    """An Iceberg topic's mode and the timestampType its rows read with."""

    mode: str
    timestamp_type: int


@dataclass(frozen=True)
class TableRange(InputPartition):
    """One Spark task reading offsets of one partition from its topic's pinned table snapshot."""

    offset_range: OffsetRange
    mode: str
    snapshot_id: int
    dlq_snapshot_id: int | None
    timestamp_type: int
    publish: bool = False
    timing: BatchTiming | None = None
    table_uuid: str | None = None  # the tables pinned: a table of the name that is not these is refused
    dlq_uuid: str | None = None


@dataclass
class LakeView:
    """What one plan reads from the tables: per Iceberg topic its settings and pinned snapshots."""

    topics: dict[str, TopicLake] = field(default_factory=dict)
    pins: dict[str, history.TablePin] = field(default_factory=dict)

    @property
    def seams(self) -> dict[tuple[str, int], int]:
        """Each partition's offset below which the pinned table holds its records."""
        return {
            (topic, partition): offset
            for topic, pin in self.pins.items()
            if pin.snapshot_id is not None
            for partition, offset in pin.next_offsets.items()
        }

    def task(self, r: OffsetRange, publish: bool, timing: BatchTiming | None) -> TableRange:
        pin, lake = self.pins[r.topic], self.topics[r.topic]
        assert pin.snapshot_id is not None
        return TableRange(
            r,
            lake.mode,
            pin.snapshot_id,
            pin.dlq_snapshot_id,
            lake.timestamp_type,
            publish,
            timing,
            pin.table_uuid,
            pin.dlq_uuid,
        )


class LakeTopics:
    """Driver-side look-ups of Iceberg topics and their tables (one per reader, not thread-safe)."""

    def __init__(self, options: LakeOptions, client_config: dict[str, str]) -> None:
        self.options = options
        self._config = {k: v for k, v in client_config.items() if k != "isolation.level"}
        self._known: dict[str, TopicLake | None] = {}
        self._admin: AdminClient | None = None
        self._first_pins: dict[str, history.TablePin] = {}  # the first pin of a table, per topic

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    def view(self, topics: Iterable[str], typed: TypedRead | None) -> LakeView:
        """Pin the tables of the Iceberg topics among ``topics``.

        Raises:
            KafkaOptionError: a ``value_schema_id_prefix`` topic read without ``valueFormat`` (its table
                has the value's fields, not its bytes).
            TableChanged: a topic's table is another one than this reader's earlier plans pinned (the
                topic deleted and created again while a streaming query reads it).
        """
        out = LakeView()
        for topic in sorted(set(topics)):
            lake = self._lake(topic)
            if lake is None:
                continue
            decoded = lake.mode == VALUE_SCHEMA_ID_PREFIX
            if decoded and (typed is None or "value" not in typed.decoders):
                raise KafkaOptionError(
                    f"Topic {topic!r} is an Iceberg topic in mode {VALUE_SCHEMA_ID_PREFIX}: its table "
                    "holds the values' fields, not their bytes, so strom.iceberg.history needs the option "
                    "valueFormat (avro, json or protobuf, as the topic's values are written)"
                )
            out.topics[topic] = lake
            pinned = history.pin(self.options.catalog, topic, with_dead_letters=decoded)
            first = self._first_pins.setdefault(topic, pinned)
            history.check_same(topic, first, pinned)
            if first.table_uuid is None:
                self._first_pins[topic] = pinned
            out.pins[topic] = pinned
        return out

    def _lake(self, topic: str) -> TopicLake | None:
        if topic not in self._known:
            self._known.update(self._describe([topic]))
        return self._known[topic]

    def _describe(self, topics: list[str]) -> dict[str, TopicLake | None]:
        if self._admin is None:
            self._admin = AdminClient(dict(self._config))
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        found: dict[str, TopicLake | None] = {}
        for resource, future in self._admin.describe_configs(
            resources, request_timeout=_REQUEST_TIMEOUT_S
        ).items():
            entries = future.result(timeout=_REQUEST_TIMEOUT_S)
            mode = _value(entries, MODE_CONFIG, DISABLED)
            stamp = _TIMESTAMP_TYPES.get(_value(entries, "message.timestamp.type", "CreateTime"), 0)
            found[resource.name] = None if mode == DISABLED else TopicLake(mode, stamp)
        return found


def _value(entries: dict[str, object], name: str, default: str) -> str:
    entry = entries.get(name)
    value = getattr(entry, "value", None)
    return str(value) if value is not None else default
