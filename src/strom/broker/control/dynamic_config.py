"""Dynamic broker configuration (KIP-226): broker configs changed at run time, per broker or cluster-wide.

A broker config has up to four sources, strongest first: DYNAMIC_BROKER_CONFIG (set for this broker id
with AlterConfigs or IncrementalAlterConfigs on the BROKER resource named by the id),
DYNAMIC_DEFAULT_BROKER_CONFIG (set for every broker: the BROKER resource with the empty name),
STATIC_BROKER_CONFIG (the broker's properties file and ``--set``) and DEFAULT_CONFIG. DescribeConfigs
reports the strongest as the value and, when asked (``include_synonyms``), every source in that order,
as Kafka does. The dynamic values live in the metadata store (Kafka's ``/config/brokers/<id>`` and
``/config/brokers/<default>``, cluster/broker_config_znodes.py) with a change notification, so every
broker re-reads them when one changes, and after a restart.

Which configs are dynamic here (`DYNAMIC_CONFIGS`): those Kafka marks dynamic cluster-wide that Strom
has, the broker-level defaults of topic configs (``log.retention.ms``, ``log.segment.bytes``,
``message.max.bytes``, ``log.cleanup.policy``, ``min.insync.replicas``, ...). A change of them applies
at once to every topic without an override of its own (broker.py: the broker's default `LogConfig` is
rebuilt and every hosted log takes its new effective config). The others (`BROKER_DYNAMIC_CONFIGS`:
``transaction.partition.verification.enable``, ``log.cleaner.backoff.ms``, which the cleaner reads each
time it goes idle) are read with `DynamicBrokerConfig.value` where they act. Any other config is
refused with INVALID_REQUEST, naming it, as Kafka refuses a config it cannot update without a restart.
``min.insync.replicas`` is dynamic on the cluster default only (INVALID_CONFIG for one broker): the
controller keeps eligible leader replicas by the value leaders use (`strom.cluster.election_configs`),
as Kafka refuses a broker-level value with ELR on.

A listener's key store and trust store (``listener.name.<listener>.ssl.keystore.location`` and the other
settings of `strom.broker.security.config_defs.DYNAMIC_LISTENER_TLS`) are dynamic per broker only, as in
Kafka: set on the cluster default they are refused ("broker id must be specified"). `for_listener` and
`listener_raw` read a listener's settings with this broker's dynamic values over the static ones, so the
listener's TLS context is built from them at start and rebuilt when they change, or when the files
they name change on disk (Kafka's reload: altering a key store location to the same path re-reads a
modified file; strom.broker.security.connection). A secret among them (a key password, an inline key) is
refused with INVALID_CONFIG: the metadata store would hold it in clear, and Kafka stores one only
encrypted with ``password.encoder.secret``, which Strom does not have. DescribeConfigs lists such a
setting's synonyms as Kafka does: the listener-prefixed name's dynamic and static values, then the
broker-wide name's. Pure: `DynamicBrokerConfig` holds the three layers and answers what the handlers
and the broker ask.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from strom._util.errors import ConfigError
from strom.broker.config import BROKER_CONFIGS, BrokerConfig
from strom.broker.security.config_defs import LISTENER_PREFIX, dynamic_listener_setting, is_secret
from strom.cluster.broker_config_znodes import DEFAULT_ENTITY
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.config import LogConfig

__all__ = [
    "BROKER_DYNAMIC_CONFIGS",
    "DEFAULT_BROKER_ENTITY",
    "DYNAMIC_CONFIGS",
    "SOURCE_DEFAULT",
    "SOURCE_DYNAMIC_BROKER",
    "SOURCE_DYNAMIC_DEFAULT",
    "SOURCE_STATIC",
    "DynamicBrokerConfig",
    "Synonym",
    "check_dynamic",
    "is_dynamic",
]

log = logging.getLogger(__name__)

#: Kafka's ConfigSource codes (DescribeConfigs v1+).
SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC, SOURCE_DEFAULT = 2, 3, 4, 5
#: The znode name of the cluster-wide default (the BROKER resource with the empty name).
DEFAULT_BROKER_ENTITY = DEFAULT_ENTITY
#: Dynamic broker configs that feed no topic config: read where they act, at each use.
BROKER_DYNAMIC_CONFIGS: frozenset[str] = frozenset(
    {"transaction.partition.verification.enable", "log.cleaner.backoff.ms"}
)
DYNAMIC_CONFIGS: frozenset[str] = (
    frozenset(name for name, d in BROKER_CONFIGS.items() if d.topic_name) | BROKER_DYNAMIC_CONFIGS
)

# (name, value, source): one synonym.
Synonym = tuple[str, str | None, int]


def _normalized(name: str, text: str) -> str:
    value = BROKER_CONFIGS[name].parse(text)
    return str(value).lower() if isinstance(value, bool) else str(value)


def is_dynamic(name: str) -> bool:
    """Whether a broker config may be set at run time (for some broker, or cluster-wide)."""
    return name in DYNAMIC_CONFIGS or dynamic_listener_setting(name) is not None


def check_dynamic(configs: Mapping[str, str], per_broker: bool = True) -> None:
    """KafkaError unless every config may be set dynamically to its value (INVALID_REQUEST for a config
    that needs a restart or is unknown, or a listener's TLS setting on the cluster default;
    INVALID_CONFIG for a bad value)."""
    static_only = sorted(name for name in configs if not is_dynamic(name))
    if static_only:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot update these configs dynamically: {static_only} (set them in the broker's properties)",
        )
    listener_tls = sorted(name for name in configs if dynamic_listener_setting(name) is not None)
    if listener_tls and not per_broker:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Cannot update these configs at default cluster level, broker id must be specified: "
            f"{listener_tls}",
        )
    if per_broker and "min.insync.replicas" in configs:
        # Leaders and the controller must agree on it: the controller keeps eligible leader replicas
        # (KIP-966) by it, so one broker's own value could make it elect a replica without records.
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            "min.insync.replicas cannot be set for one broker (eligible leader replicas need one value "
            "per topic): set it on the cluster default (the BROKER resource with an empty name) or on "
            "the topic",
        )
    secrets = sorted(name for name in configs if dynamic_listener_setting(name) and is_secret(name))
    if secrets:
        # Dynamic configs are stored in the metadata store as they are; Kafka stores a password there
        # only encrypted with password.encoder.secret, which Strom does not have, and refuses it without.
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Cannot store these secrets dynamically: {secrets} (the metadata store would hold them in "
            "clear); use a key store without a password, or set them in the broker's properties",
        )
    topic_form: dict[str, str] = {}
    for name, text in configs.items():
        if (listener := dynamic_listener_setting(name)) is not None:
            definition = BROKER_CONFIGS.get(listener[1])
            try:
                if definition is not None:
                    definition.parse(text)
            except ValueError as exc:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"invalid value for {name}: {text!r} ({exc})"
                ) from None
            continue
        try:
            normalized = _normalized(name, text)
            if name == "log.cleaner.backoff.ms" and int(normalized) < 0:
                raise ValueError("must not be negative")
            topic_name = BROKER_CONFIGS[name].topic_name
            if topic_name is not None:
                topic_form[topic_name] = normalized
        except ValueError as exc:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"invalid value for {name}: {text!r} ({exc})"
            ) from None
    LogConfig.from_properties(topic_form, LogConfig())  # the topic-level checks: INVALID_CONFIG


class DynamicBrokerConfig:
    """The static config with this broker's and the cluster's dynamic values on top."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}

    def replace(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> bool:
        """Take the stored dynamic values (unknown or static-only keys ignored); whether any changed."""
        mine = {k: v for k, v in per_broker.items() if is_dynamic(k) and k != "min.insync.replicas"}
        if "min.insync.replicas" in per_broker:  # stored before it was refused: the controller ignores it
            log.warning("ignoring this broker's own min.insync.replicas: set it on the cluster default")
        default = {k: v for k, v in cluster_default.items() if k in DYNAMIC_CONFIGS}
        changed = (mine, default) != (self.per_broker, self.cluster_default)
        self.per_broker, self.cluster_default = mine, default
        return changed

    def overlay(self, per_broker: Mapping[str, str]) -> DynamicBrokerConfig:
        """The same broker with other dynamic values of its own (to check them before they are stored)."""
        other = DynamicBrokerConfig(self.static)
        other.per_broker = {k: v for k, v in per_broker.items() if is_dynamic(k)}
        other.cluster_default = dict(self.cluster_default)
        return other

    def listener_raw(self, listener: str, name: str) -> str | None:
        """``listener.name.<listener>.<name>``, unparsed: this broker's dynamic value, else the static one."""
        key = f"{LISTENER_PREFIX}{listener.lower()}.{name}"
        dynamic = self.per_broker.get(key)
        return dynamic if dynamic is not None else self.static.listener_raw(listener, name)

    def for_listener(self, listener: str, name: str) -> Any:
        """A setting as ``listener`` sees it (parsed): its dynamic per-listener value over the static
        config's per-listener value, else the broker-wide one."""
        raw = self.per_broker.get(f"{LISTENER_PREFIX}{listener.lower()}.{name}")
        if raw is None:
            return self.static.for_listener(listener, name)
        definition = BROKER_CONFIGS.get(name)
        try:
            return definition.parse(raw) if definition is not None else raw
        except ValueError as exc:
            raise ConfigError(f"invalid value for listener {listener} {name}: {raw!r} ({exc})") from None

    def listener_keys(self) -> list[str]:
        """Every ``listener.name.<l>.<setting>`` set, statically or dynamically for this broker."""
        found = set(self.static.listener_overrides)
        found.update(k for k in self.per_broker if k.startswith(LISTENER_PREFIX))
        return sorted(found)

    def listener_synonyms(self, key: str) -> list[Synonym]:
        """A per-listener setting's sources, strongest first: the prefixed name set dynamically for this
        broker, then statically, then the broker-wide name's sources (secrets hidden as None)."""
        out: list[Synonym] = []
        hidden = is_secret(key)
        if key in self.per_broker:
            out.append((key, None if hidden else self.per_broker[key], SOURCE_DYNAMIC_BROKER))
        if key in self.static.listener_overrides:
            out.append((key, None if hidden else self.static.listener_overrides[key], SOURCE_STATIC))
        parsed = dynamic_listener_setting(key)
        if parsed is not None:
            out.extend((n, None if is_secret(n) else v, src) for n, v, src in self.synonyms(parsed[1]))
        return out

    def synonyms(self, name: str) -> list[Synonym]:
        """Every source that sets ``name``, strongest first (a secret's value hidden as None)."""
        out: list[Synonym] = []
        if name in self.per_broker:
            out.append((name, self.per_broker[name], SOURCE_DYNAMIC_BROKER))
        if name in self.cluster_default:
            out.append((name, self.cluster_default[name], SOURCE_DYNAMIC_DEFAULT))
        if name in self.static.raw:
            out.append((name, None if is_secret(name) else self.static.raw[name], SOURCE_STATIC))
        definition = BROKER_CONFIGS.get(name)
        if definition is not None and definition.default is not None:
            out.append((name, definition.default, SOURCE_DEFAULT))
        return out

    def source_of_topic_default(self, topic_name: str) -> int | None:
        """Where the broker-level default of a topic config comes from (None: Kafka's own default)."""
        for name, definition in BROKER_CONFIGS.items():
            if definition.topic_name == topic_name:
                synonyms = self.synonyms(name)
                return synonyms[0][2] if synonyms and synonyms[0][2] != SOURCE_DEFAULT else None
        return None

    def topic_defaults(self) -> dict[str, str]:
        """The broker-level defaults of topic configs, in topic config names, dynamic values included."""
        out = self.static.topic_defaults()
        for name in DYNAMIC_CONFIGS - BROKER_DYNAMIC_CONFIGS:
            text = self.per_broker.get(name, self.cluster_default.get(name))
            if text is not None:
                out[str(BROKER_CONFIGS[name].topic_name)] = _normalized(name, text)
        return out

    def value(self, name: str) -> Any:
        """A dynamic broker config's value in force here, parsed (this broker's, the cluster's, the
        static one, the default: the first set)."""
        text = self.per_broker.get(name, self.cluster_default.get(name))
        if text is None:
            return self.static.get(name)
        return BROKER_CONFIGS[name].parse(text)

    def log_config(self) -> LogConfig:
        return LogConfig.from_properties(self.topic_defaults(), LogConfig())
