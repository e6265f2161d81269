"""``strom configs``: broker configs (KIP-226), broker log levels (KIP-412) and groups' own configs (the
GROUP resource of KIP-848 and KIP-932), as ``kafka-configs.sh`` shows and changes them, over
DescribeConfigs and IncrementalAlterConfigs.

Both admin clients refuse the BROKER resource with the empty name (the cluster-wide default) that the
protocol allows, so the messages are kafka-python's classes sent over the connection
`strom.console.kafka_admin` opens, as `strom.console.quotas` does. ``describe`` prints the dynamic
values (every config with ``--all``) with their synonyms, in kafka-configs.sh's layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_admin import admin_call, kafka_admin

BROKER, BROKER_LOGGER, GROUP = 4, 8, 32
ENTITY_TYPES = {"brokers": BROKER, "broker-loggers": BROKER_LOGGER, "groups": GROUP}
_SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    8: "GROUP_CONFIG",
}
_DYNAMIC_SOURCES = {2, 3, 6, 8}
SET, DELETE = 0, 1


def _send(options: ClientOptions, what: str, request: Any) -> Any:
    with kafka_admin(options, "configs") as admin:
        manager = admin._manager  # kafka-python's own request path (routing, retries, security)
        return admin_call(options, what, lambda: manager.run(manager.send, request))


def entity_text(resource_type: int, name: str) -> str:
    if resource_type == BROKER_LOGGER:
        return f"broker-logger {name}"
    if resource_type == GROUP:
        return f"group {name}"
    return "brokers in the cluster" if name == "" else f"broker {name}"


def describe(options: ClientOptions, resource_type: int, name: str, show_all: bool) -> list[str]:
    """kafka-configs.sh's lines: a heading, then ``  name=value sensitive=... synonyms={...}``."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=None
            )
        ],
        include_synonyms=True,
    )
    [result] = _send(options, f"cannot describe {entity_text(resource_type, name)}", request).results
    if result.error_code:
        raise ConsoleError(f"cannot describe {entity_text(resource_type, name)}: {result.error_message}")
    kind = "All" if show_all else "Default" if name == "" else "Dynamic"
    lines = [f"{kind} configs for {entity_text(resource_type, name)} are:"]
    for config in sorted(result.configs, key=lambda c: str(c.name)):
        if not show_all and config.config_source not in _DYNAMIC_SOURCES:
            continue
        value = "null" if config.is_sensitive else config.value
        synonyms = ", ".join(
            f"{_SOURCES.get(s.source, s.source)}:{s.name}={'null' if config.is_sensitive else s.value}"
            for s in config.synonyms or []
        )
        lines.append(
            f"  {config.name}={value} sensitive={str(config.is_sensitive).lower()} synonyms={{{synonyms}}}"
        )
    return lines


def alter(
    options: ClientOptions, resource_type: int, name: str, add: Mapping[str, str], delete: Sequence[str]
) -> None:
    configs = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[configs(name=k, config_operation=SET, value=v) for k, v in add.items()]
                + [configs(name=k, config_operation=DELETE, value=None) for k in delete],
            )
        ],
        validate_only=False,
    )
    what = f"cannot alter {entity_text(resource_type, name)}"
    for response in _send(options, what, request).responses:
        if response.error_code:
            raise ConsoleError(f"{what}: {response.error_message or response.error_code}")
