"""Broker configuration: Kafka's `server.properties` names, a properties file plus `--set` overrides.

Every key a broker understands is declared once in `BROKER_CONFIGS` with its type, default and doc, so
the same table validates input, fills defaults and answers DescribeConfigs for the BROKER resource. Unknown
keys are rejected at start-up (a typo in `log.retention.ms` should not silently keep seven days).
Topic-level defaults (`log.segment.bytes` → `segment.bytes`, …) are derived here and handed to storage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom._util.errors import ConfigError
from strom.broker.authorization import check_authorizer_class
from strom.broker.replication.replica_selector import check_selector
from strom.broker.security.config_defs import (
    LISTENER_PREFIX,
    SECURITY_CONFIGS,
    SENSITIVE,
    is_listener_override,
    is_secret,
)
from strom.broker.tiered.config_defs import SECRET_PLUGIN_SETTINGS, TIERED_CONFIGS, is_plugin_setting
from strom.lake.config_defs import LAKE_CONFIGS, is_lake_property, is_secret_lake_property


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _parse_share_reset(raw: str) -> str:
    if raw not in ("latest", "earliest"):
        raise ValueError(f"{raw!r} is neither latest nor earliest")
    return raw


def _parse_list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    parse: Callable[[str], Any]
    default: str | None
    doc: str
    # Kafka topic config this broker default feeds, if any (`log.retention.ms` → `retention.ms`).
    topic_name: str | None = None


_LONG_MAX = str(2**63 - 1)
_PARSERS: dict[str, Callable[[str], Any]] = {"bool": _parse_bool, "int": int, "str": str}

BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("broker.id", int, "0", "This broker's id, unique in the cluster."),
        ConfigDef("broker.rack", str, None, "Rack of this broker, for rack-aware replica assignment."),
        ConfigDef(
            "cluster.id", str, None, "Cluster id; generated on first start and kept in meta.properties."
        ),
        ConfigDef("listeners", _parse_list, "PLAINTEXT://127.0.0.1:9092", "Addresses to listen on."),
        ConfigDef(
            "http.listeners",
            _parse_list,
            "http://127.0.0.1:8081",
            "HTTP listeners (schema registry): http://host:port, comma-separated; empty turns HTTP off.",
        ),
        ConfigDef(
            "http.authentication.method",
            str,
            None,
            "Strom: NONE or BASIC (HTTP Basic against the SASL users; client certificates on https://); "
            "unset: BASIC when a Kafka listener uses SASL, else NONE.",
        ),
        ConfigDef(
            "http.metrics.public",
            _parse_bool,
            "false",
            "Strom: serve /metrics without authentication or ACLs (a scraper without credentials).",
        ),
        ConfigDef(
            "http.console.history.interval.ms",
            int,
            "10000",
            "Strom: the console's charts keep one value per interval for the last 360 intervals (an hour).",
        ),
        ConfigDef(
            "metrics.enabled",
            _parse_bool,
            "true",
            "Strom: count requests and serve Prometheus metrics at /metrics on the HTTP listener.",
        ),
        ConfigDef(
            "advertised.listeners", _parse_list, None, "Addresses given to clients (default: listeners)."
        ),
        ConfigDef("log.dirs", _parse_list, "./data", "Directories holding partition logs."),
        ConfigDef(
            "zookeeper.connect", str, None, "ZooKeeper ensemble; unset means single-node embedded mode."
        ),
        ConfigDef("zookeeper.session.timeout.ms", int, "18000", "ZooKeeper session timeout."),
        ConfigDef("num.partitions", int, "1", "Default partition count for new topics."),
        ConfigDef("default.replication.factor", int, "1", "Default replication factor for new topics."),
        ConfigDef("auto.create.topics.enable", _parse_bool, "true", "Create unknown topics on Metadata."),
        ConfigDef("delete.topic.enable", _parse_bool, "true", "Allow DeleteTopics."),
        ConfigDef("message.max.bytes", int, "1048588", "Largest record batch.", "max.message.bytes"),
        ConfigDef("socket.request.max.bytes", int, "104857600", "Largest request frame accepted."),
        ConfigDef(
            "telemetry.max.bytes", int, "1048576", "Largest client metrics push (KIP-714), decompressed."
        ),
        ConfigDef("log.segment.bytes", int, "1073741824", "Segment size before a roll.", "segment.bytes"),
        ConfigDef("log.roll.ms", int, "604800000", "Segment age before a roll.", "segment.ms"),
        ConfigDef("log.retention.ms", int, "604800000", "Time retention (-1: forever).", "retention.ms"),
        ConfigDef("log.retention.bytes", int, "-1", "Size retention per partition.", "retention.bytes"),
        ConfigDef("log.retention.check.interval.ms", int, "300000", "How often retention runs."),
        ConfigDef(
            "log.index.interval.bytes", int, "4096", "Bytes between index entries.", "index.interval.bytes"
        ),
        ConfigDef("log.index.size.max.bytes", int, "10485760", "Max index size.", "segment.index.bytes"),
        ConfigDef("log.flush.interval.messages", int, _LONG_MAX, "Messages before fsync.", "flush.messages"),
        ConfigDef("log.flush.interval.ms", int, _LONG_MAX, "Time before fsync.", "flush.ms"),
        ConfigDef("log.flush.scheduler.interval.ms", int, "1000", "How often flush.ms is checked."),
        ConfigDef(
            "log.flush.offset.checkpoint.interval.ms",
            int,
            "60000",
            "How often each log dir's offset checkpoints are written.",
        ),
        ConfigDef(
            "log.max.open.files",
            int,
            "0",
            "Strom: segment files kept open at most (an LRU shared by all logs; idle ones are closed and"
            " reopened on use). 0: half of RLIMIT_NOFILE (raised to the hard limit at start), at most 8000.",
        ),
        ConfigDef("log.cleanup.policy", str, "delete", "delete, compact or both.", "cleanup.policy"),
        ConfigDef(
            "log.cleaner.delete.retention.ms", int, "86400000", "Tombstone lifetime.", "delete.retention.ms"
        ),
        ConfigDef(
            "log.cleaner.min.cleanable.ratio", float, "0.5", "Dirty ratio.", "min.cleanable.dirty.ratio"
        ),
        ConfigDef("log.cleaner.min.compaction.lag.ms", int, "0", "Compaction lag.", "min.compaction.lag.ms"),
        ConfigDef("log.cleaner.backoff.ms", int, "15000", "Cleaner sleep when idle."),
        ConfigDef(
            "producer.id.expiration.ms",
            int,
            "86400000",
            "Forget an idempotent producer whose last batch is this old (its state, not its data).",
        ),
        ConfigDef(
            "producer.id.expiration.check.interval.ms",
            int,
            "600000",
            "How often producer.id.expiration.ms is applied.",
        ),
        ConfigDef(
            "log.message.timestamp.type",
            str,
            "CreateTime",
            "CreateTime or LogAppendTime.",
            "message.timestamp.type",
        ),
        ConfigDef("min.insync.replicas", int, "1", "Minimum ISR size for acks=all.", "min.insync.replicas"),
        ConfigDef(
            "unclean.leader.election.enable",
            _parse_bool,
            "false",
            "Elect out-of-ISR leaders.",
            "unclean.leader.election.enable",
        ),
        ConfigDef(
            "compression.type",
            str,
            "producer",
            "Default codec of stored batches: producer, uncompressed, gzip, snappy, lz4 or zstd.",
            "compression.type",
        ),
        ConfigDef("offsets.topic.num.partitions", int, "50", "Partitions of __consumer_offsets."),
        ConfigDef("offsets.topic.replication.factor", int, "3", "Replication of __consumer_offsets."),
        ConfigDef("offsets.retention.minutes", int, "10080", "Committed offsets retention."),
        ConfigDef("transaction.state.log.num.partitions", int, "50", "Partitions of __transaction_state."),
        ConfigDef(
            "transaction.state.log.replication.factor",
            int,
            "3",
            "Replication of __transaction_state (capped at the live brokers when it is created).",
        ),
        ConfigDef("transaction.state.log.min.isr", int, "2", "min.insync.replicas of __transaction_state."),
        ConfigDef("transaction.max.timeout.ms", int, "900000", "Largest transaction timeout allowed."),
        ConfigDef(
            "transaction.partition.verification.enable",
            _parse_bool,
            "true",
            "KIP-890: a partition leader asks the transaction coordinator before it appends a transaction's "
            "first batch (dynamic).",
        ),
        ConfigDef(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            int,
            "10000",
            "How often transactions past their timeout are aborted.",
        ),
        ConfigDef(
            "transactional.id.expiration.ms",
            int,
            "604800000",
            "How long a transactional id may stay idle (no transaction, no InitProducerId) before expiring.",
        ),
        ConfigDef(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            int,
            "3600000",
            "How often expired transactional ids are removed.",
        ),
        ConfigDef(
            "offsets.commit.timeout.ms",
            int,
            "5000",
            "Cluster mode: how long an offset commit waits for the ISR of __consumer_offsets.",
        ),
        ConfigDef("group.initial.rebalance.delay.ms", int, "3000", "Delay of a new group's first rebalance."),
        ConfigDef("group.min.session.timeout.ms", int, "6000", "Smallest session timeout."),
        ConfigDef("group.max.session.timeout.ms", int, "1800000", "Largest session timeout."),
        # KIP-848 consumer groups (group.protocol=consumer), Kafka 4's names and defaults.
        ConfigDef(
            "group.consumer.heartbeat.interval.ms", int, "5000", "Consumer groups' heartbeat interval."
        ),
        ConfigDef(
            "group.consumer.min.heartbeat.interval.ms", int, "5000", "Smallest consumer heartbeat interval."
        ),
        ConfigDef(
            "group.consumer.max.heartbeat.interval.ms", int, "15000", "Largest consumer heartbeat interval."
        ),
        ConfigDef("group.consumer.session.timeout.ms", int, "45000", "Consumer groups' session timeout."),
        ConfigDef(
            "group.consumer.min.session.timeout.ms", int, "45000", "Smallest consumer session timeout."
        ),
        ConfigDef("group.consumer.max.session.timeout.ms", int, "60000", "Largest consumer session timeout."),
        ConfigDef(
            "group.consumer.assignors",
            str,
            "uniform,range",
            "Consumer groups' server-side assignors (short or class names); the first is the default.",
        ),
        ConfigDef("group.consumer.max.size", int, str(2**31 - 1), "Most members of one consumer group."),
        ConfigDef(
            "group.consumer.migration.policy",
            str,
            "bidirectional",
            "Online conversion of groups with members: disabled, upgrade, downgrade or bidirectional.",
        ),
        # KIP-932 share groups, Kafka 4's names and defaults (docs/share-groups.md).
        ConfigDef("group.share.heartbeat.interval.ms", int, "5000", "Share groups' heartbeat interval."),
        ConfigDef("group.share.session.timeout.ms", int, "45000", "Share groups' session timeout."),
        ConfigDef("group.share.max.size", int, "200", "Most members of one share group."),
        ConfigDef(
            "group.share.max.share.sessions",
            int,
            "2000",
            "Most share sessions a broker keeps (idle ones are evicted after the session timeout).",
        ),
        ConfigDef(
            "group.share.record.lock.duration.ms",
            int,
            "30000",
            "How long a share consumer holds the records it acquired before they are released.",
        ),
        ConfigDef(
            "group.share.delivery.count.limit",
            int,
            "5",
            "Deliveries of a record to share consumers before it is archived instead of redelivered.",
        ),
        # The bounds of a share group's own values (the GROUP config resource), Kafka's defaults.
        ConfigDef("group.share.min.session.timeout.ms", int, "45000", "Smallest share session timeout."),
        ConfigDef("group.share.max.session.timeout.ms", int, "60000", "Largest share session timeout."),
        ConfigDef("group.share.min.heartbeat.interval.ms", int, "5000", "Smallest share heartbeat interval."),
        ConfigDef("group.share.max.heartbeat.interval.ms", int, "15000", "Largest share heartbeat interval."),
        ConfigDef(
            "group.share.min.record.lock.duration.ms", int, "15000", "Smallest share record lock duration."
        ),
        ConfigDef(
            "group.share.max.record.lock.duration.ms", int, "60000", "Largest share record lock duration."
        ),
        ConfigDef("group.share.min.delivery.count.limit", int, "2", "Smallest share delivery count limit."),
        ConfigDef("group.share.max.delivery.count.limit", int, "10", "Largest share delivery count limit."),
        ConfigDef(
            "share.auto.offset.reset",
            _parse_share_reset,
            "latest",
            "Where a share group starts reading a partition it has no state for: latest or earliest "
            "(a group config in Kafka; here the default of every share group).",
        ),
        ConfigDef(
            "share.coordinator.state.topic.num.partitions", int, "50", "Partitions of __share_group_state."
        ),
        ConfigDef(
            "share.coordinator.state.topic.replication.factor",
            int,
            "3",
            "Replication factor of __share_group_state (capped at the live brokers).",
        ),
        ConfigDef(
            "share.coordinator.state.topic.min.isr", int, "2", "min.insync.replicas of __share_group_state."
        ),
        ConfigDef("replica.lag.time.max.ms", int, "10000", "Follower lag before it leaves the ISR."),
        ConfigDef("replica.fetch.max.bytes", int, "1048576", "Follower fetch size per partition."),
        ConfigDef("replica.fetch.wait.max.ms", int, "500", "Follower fetch long-poll."),
        ConfigDef(
            "replica.selector.class",
            check_selector,
            None,
            "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector lets consumers fetch from an "
            "in-sync replica in their rack (client.rack); unset, consumers read from the leader.",
        ),
        ConfigDef("auto.leader.rebalance.enable", _parse_bool, "true", "Move leadership back to preferred."),
        ConfigDef("leader.imbalance.check.interval.seconds", int, "300", "Preferred-leader check period."),
        ConfigDef("controlled.shutdown.enable", _parse_bool, "true", "Move leaders away before stopping."),
        *(ConfigDef(*row) for row in SECURITY_CONFIGS),
        *(ConfigDef(name, _PARSERS[kind], default, doc) for name, kind, default, doc in TIERED_CONFIGS),
        *(ConfigDef(name, _PARSERS[kind], default, doc) for name, kind, default, doc in LAKE_CONFIGS),
        ConfigDef(
            "authorizer.class.name",
            check_authorizer_class,
            "",
            "ACLs on: kafka.security.authorizer.AclAuthorizer or "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer (Kafka's rules either way).",
        ),
        ConfigDef(
            "super.users", str, "", "Principals allowed everything, ';'-separated (User:admin;User:broker)."
        ),
        ConfigDef(
            "allow.everyone.if.no.acl.found",
            _parse_bool,
            "false",
            "With ACLs on: allow a resource that has no ACL at all.",
        ),
        ConfigDef("quota.window.num", int, "11", "Samples a client quota's rate is measured over."),
        ConfigDef("quota.window.size.seconds", int, "1", "Time span of each client quota sample."),
        ConfigDef("num.io.threads", int, "8", "Accepted for compatibility; Strom uses one event loop."),
        ConfigDef("num.network.threads", int, "3", "Accepted for compatibility; Strom uses one event loop."),
    )
}


def _read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {stripped!r}")
        out[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class BrokerConfig:
    """Validated broker configuration; `raw` keeps what the user set, for DescribeConfigs."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self.raw = dict(props)
        self._values: dict[str, Any] = {}
        for name, definition in BROKER_CONFIGS.items():
            text = props.get(name, definition.default)
            if text is None:
                self._values[name] = None
                continue
            try:
                self._values[name] = definition.parse(text)
            except ValueError as exc:
                raise ConfigError(f"invalid value for {name}: {text!r} ({exc})") from None
        # ``listener.name.<listener>.<config>``: Kafka's per-listener overrides of security settings.
        self.listener_overrides = {k: v for k, v in props.items() if is_listener_override(k)}
        # ``rsm.config.*`` / ``rlmm.config.*``: tiered storage's plugin settings, passed on as they are.
        # ``strom.iceberg.catalog.property.*``: pyiceberg catalog properties, passed on as they are.
        self.plugin_settings = {k: v for k, v in props.items() if is_plugin_setting(k) or is_lake_property(k)}
        unknown = sorted(
            set(props) - set(BROKER_CONFIGS) - set(self.listener_overrides) - set(self.plugin_settings)
        )
        if unknown:
            raise ConfigError(f"unknown broker config: {', '.join(unknown)}")

    @classmethod
    def load(cls, config_file: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        props = _read_properties(Path(config_file)) if config_file else {}
        props.update(parse_overrides(overrides))
        return cls(props)

    def get(self, name: str) -> Any:
        return self._values[name]

    def for_listener(self, listener: str, name: str) -> Any:
        """``listener.name.<listener>.<name>`` if set, else the broker-wide ``name`` (parsed)."""
        raw = self.listener_overrides.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
        if raw is None:
            return self._values.get(name)
        definition = BROKER_CONFIGS.get(name)
        try:
            return definition.parse(raw) if definition is not None else raw
        except ValueError as exc:
            raise ConfigError(f"invalid value for listener {listener} {name}: {raw!r} ({exc})") from None

    def listener_raw(self, listener: str, name: str) -> str | None:
        """A per-listener-only setting (``listener.name.<listener>.<name>``), unparsed; None if unset."""
        return self.listener_overrides.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")

    @property
    def broker_id(self) -> int:
        return int(self._values["broker.id"])

    @property
    def log_dirs(self) -> list[str]:
        return list(self._values["log.dirs"])

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults expressed as topic config names, for storage's LogConfig."""
        out: dict[str, str] = {}
        for definition in BROKER_CONFIGS.values():
            if definition.topic_name is None:
                continue
            value = self._values[definition.name]
            out[definition.topic_name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def describe(self) -> list[tuple[str, str | None, bool]]:
        """(name, value, is_default) for every broker config, as DescribeConfigs reports them.

        Secrets (passwords, private keys, JAAS configs) are reported as None, as Kafka reports them.
        """
        rows: list[tuple[str, str | None, bool]] = []
        for name, definition in BROKER_CONFIGS.items():
            if name in self.raw:
                rows.append((name, None if name in SENSITIVE else self.raw[name], False))
            else:
                rows.append((name, definition.default, True))
        for name in sorted(self.listener_overrides):
            hidden = is_secret(name)
            rows.append((name, None if hidden else self.listener_overrides[name], False))
        for name in sorted(self.plugin_settings):
            hidden = name in SECRET_PLUGIN_SETTINGS or is_secret_lake_property(name)
            rows.append((name, None if hidden else self.plugin_settings[name], False))
        return rows
