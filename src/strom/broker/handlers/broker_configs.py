"""The BROKER and BROKER_LOGGER resources of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

BROKER (4), KIP-226: the resource named by a broker id is that broker's config. Described, every
config has its value from the strongest source (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
STATIC_BROKER_CONFIG, DEFAULT_CONFIG; strom.broker.control.dynamic_config) and, with
``include_synonyms``, every source that sets it; configs that cannot change without a restart are
``read_only``; secrets are set but never shown. The resource with the empty name is the cluster-wide
default: described, it lists the dynamic defaults only (as Kafka does). Altered (either name), the
dynamic values are written to the metadata store, from which every broker applies them (its change
notification); this broker applies them at once. A broker id other than this broker's may be altered
(Kafka's ZooKeeper mode allows it) but is described by that broker only. A listener's key store and
trust store (``listener.name.<l>.ssl.keystore.location`` ...) may be altered per broker only; on this
broker the new stores are loaded first and refused with INVALID_CONFIG if they do not load, and an
alteration naming a key store file that did not change in the config still re-reads it (the file
rewritten in place: Kafka's reload) and checks it. Only the listeners whose store settings the request
alters are checked: an unrelated alteration is never refused because some key store changed on disk.

BROKER_LOGGER (8), KIP-412: this broker's loggers and their levels in log4j's names (TRACE, DEBUG,
INFO, WARN, ERROR, FATAL), the root logger as ``root``. IncrementalAlterConfigs SET changes a level at
once, DELETE hands a logger back to its parent's level (the root logger cannot be deleted); levels are
not persisted (a restart starts from the logging setup), as in Kafka. AlterConfigs cannot alter loggers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from strom._util.errors import ConfigError
from strom.broker.config import BROKER_CONFIGS
from strom.broker.control.dynamic_config import (
    DEFAULT_BROKER_ENTITY,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_DEFAULT,
    Synonym,
    check_dynamic,
    is_dynamic,
)
from strom.broker.handlers.base import HandlerPorts
from strom.broker.security.config_defs import dynamic_listener_setting, is_secret
from strom.broker.security.tls import server_context
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.messages import DescribeConfigsResponseResourceResult

__all__ = [
    "BROKER",
    "BROKER_LOGGER",
    "alter_broker",
    "alter_broker_loggers",
    "describe_broker",
    "describe_broker_loggers",
]

BROKER = 4
BROKER_LOGGER = 8
SOURCE_DYNAMIC_BROKER_LOGGER = 6
# Python's levels in log4j's names (WARNING is WARN, CRITICAL is FATAL; below DEBUG is TRACE).
_LOG4J = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING}
_LOG4J |= {"ERROR": logging.ERROR, "FATAL": logging.CRITICAL}
_ROOT = "root"

log = logging.getLogger(__name__)


def _entry(
    name: str,
    value: str | None,
    source: int,
    *,
    read_only: bool = False,
    sensitive: bool = False,
    synonyms: list[Synonym] | None = None,
    documentation: str | None = None,
) -> DescribeConfigsResponseResourceResult:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == SOURCE_DEFAULT,
        "is_sensitive": sensitive,
        "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms or []],
        "config_type": 0,  # UNKNOWN, as for topics
        "documentation": documentation,
    }


def _this_broker(ports: HandlerPorts, name: str) -> None:
    if name != str(ports.node_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"broker {name!r} is not this broker ({ports.node_id})")


def describe_broker(
    ports: HandlerPorts, name: str, keys: list[str] | None, synonyms: bool, documentation: bool
) -> list[DescribeConfigsResponseResourceResult]:
    dynamic = ports.config_entities.dynamic
    entries: list[DescribeConfigsResponseResourceResult] = []
    if name == "":
        for key, text in sorted(dynamic.cluster_default.items()):
            if keys is None or key in keys:
                syn: list[Synonym] | None = [(key, text, SOURCE_DYNAMIC_DEFAULT)] if synonyms else None
                entries.append(_entry(key, text, SOURCE_DYNAMIC_DEFAULT, synonyms=syn))
        return entries
    _this_broker(ports, name)
    for key, definition in BROKER_CONFIGS.items():
        if keys is not None and key not in keys:
            continue
        found = dynamic.synonyms(key)
        value: str | None = found[0][1] if found else None
        source = found[0][2] if found else SOURCE_DEFAULT
        secret = is_secret(key) and source != SOURCE_DEFAULT
        entries.append(
            _entry(
                key,
                None if secret else value,
                source,
                read_only=not is_dynamic(key),
                sensitive=secret,
                synonyms=found if synonyms else None,
                documentation=definition.doc if documentation else None,
            )
        )
    for key in dynamic.listener_keys():  # listener.name.<l>.<config>
        if keys is None or key in keys:
            found = dynamic.listener_synonyms(key)
            _, value, source = found[0]
            secret = is_secret(key)
            entries.append(
                _entry(
                    key,
                    None if secret else value,
                    source,
                    read_only=dynamic_listener_setting(key) is None,
                    sensitive=secret,
                    synonyms=found if synonyms else None,
                )
            )
    return entries


def _entity(broker_name: str) -> str:
    if broker_name == "":
        return DEFAULT_BROKER_ENTITY
    if not broker_name.isdigit():
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"not a broker id: {broker_name!r}")
    return broker_name


async def alter_broker(
    ports: HandlerPorts,
    name: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
    named: Collection[str] = (),
) -> None:
    """Apply ``change`` to the dynamic configs of a broker id (or the default, ``""``), checked first.

    ``named``: the configs the request alters by name (IncrementalAlterConfigs' operations), so a key
    store setting named with its current value is checked too (the file may have been rewritten in
    place); AlterConfigs replaces every config, so only those whose values change count there."""
    entity = _entity(name)
    entities = ports.config_entities
    current = await entities.read_broker_configs(entity)
    wanted = change(dict(current))
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    check_dynamic(changed, per_broker=entity != DEFAULT_BROKER_ENTITY)
    stores = {k for k in set(wanted) | set(current) if dynamic_listener_setting(k) is not None}
    if name == str(ports.node_id):
        _check_stores(ports, wanted, {k for k in stores if k in named or wanted.get(k) != current.get(k)})
    # Unchanged key store settings are written anyway: the notification makes the broker re-read files
    # that changed on disk under the same name.
    if validate_only or (wanted == current and not stores):
        return
    await entities.write_broker_configs(entity, wanted)
    log.info("dynamic configs of broker %s set to %s", name or "<default>", wanted)


def _check_stores(ports: HandlerPorts, wanted: dict[str, str], changed: set[str]) -> None:
    """Load the key store and trust store of each listener whose settings the request alters, and check
    that its certificate keeps the subject DN and SANs of the one served (INVALID_CONFIG if either
    fails), before they are stored. Other listeners are not looked at: a key store file rewritten on
    disk does not make an unrelated alteration fail (it is checked when it is re-read)."""
    trial = ports.config_entities.dynamic.overlay(wanted)
    listeners = {parsed[0] for key in changed if (parsed := dynamic_listener_setting(key))}
    for listener in sorted(listeners):
        try:
            server_context(trial, listener)
            if (security := ports.tls_listeners.get(listener)) is not None:
                security.check_keystore(trial)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _loggers() -> dict[str, logging.Logger]:
    """Every logger with a name (placeholders skipped), plus the root logger as ``root``."""
    found: dict[str, logging.Logger] = {_ROOT: logging.getLogger()}
    for name, item in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(item, logging.Logger):
            found[name] = item
    return found


def _level_name(level: int) -> str:
    for name, value in sorted(_LOG4J.items(), key=lambda kv: -kv[1]):
        if level >= value:
            return name
    return "TRACE"


def describe_broker_loggers(
    ports: HandlerPorts, name: str, keys: list[str] | None
) -> list[DescribeConfigsResponseResourceResult]:
    _this_broker(ports, name)
    entries: list[DescribeConfigsResponseResourceResult] = []
    for logger_name, logger in _loggers().items():
        if keys is None or logger_name in keys:
            level = _level_name(logger.getEffectiveLevel())
            entries.append(_entry(logger_name, level, SOURCE_DYNAMIC_BROKER_LOGGER))
    return entries


def alter_broker_loggers(
    ports: HandlerPorts, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
) -> None:
    """IncrementalAlterConfigs on this broker's loggers: SET a level, DELETE back to the parent's."""
    _this_broker(ports, name)
    loggers = _loggers()
    current = {n: _level_name(lg.getEffectiveLevel()) for n, lg in loggers.items()}
    wanted = change(dict(current))
    updates: dict[str, int] = {}
    for logger_name in sorted(set(current) | set(wanted)):
        level = wanted.get(logger_name)
        if level == current.get(logger_name):
            continue
        if level is None:
            if logger_name == _ROOT:
                raise KafkaError(ErrorCode.INVALID_CONFIG, "the root logger's level cannot be removed")
            updates[logger_name] = logging.NOTSET
            continue
        if level.upper() not in _LOG4J:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{level!r} is not a log level ({', '.join(_LOG4J)})")
        updates[logger_name] = _LOG4J[level.upper()]
    if validate_only:
        return
    for logger_name, new_level in updates.items():
        (logging.getLogger() if logger_name == _ROOT else logging.getLogger(logger_name)).setLevel(new_level)
        log.info("logger %s set to %s", logger_name, logging.getLevelName(new_level))
