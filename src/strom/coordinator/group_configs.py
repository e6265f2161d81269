"""Per-group configs: the GROUP config resource (type 32) of KIP-848 and KIP-932, pure.

Theory of operation. A group may override some of the broker's group settings, by name of Kafka's
GroupConfig: a share group ``share.auto.offset.reset``, ``share.record.lock.duration.ms``,
``share.delivery.count.limit``, ``share.session.timeout.ms`` and ``share.heartbeat.interval.ms``, a
KIP-848 consumer group ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``. Each
has the broker config that gives its default (``group.share.record.lock.duration.ms`` ...) and, for a number,
the broker configs that bound it (``group.share.min.record.lock.duration.ms`` ..
``group.share.max...``): an override outside them, not a number, or an unknown name is refused with
INVALID_CONFIG, as Kafka's broker validates them. `check` validates a group's overrides, `value`
gives a config's effective value for a group (its override, else the broker's). The broker's values
are read through a getter of parsed broker configs, so this module knows nothing of where they come
from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.protocol.errors import ErrorCode, KafkaError

__all__ = ["GROUP_CONFIGS", "BrokerGetter", "GroupConfigDef", "check", "value"]

BrokerGetter = Callable[[str], Any]  # a broker config's parsed value, by name

SHARE_RESETS = ("latest", "earliest")


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    default: str  # the broker config giving the default
    low: str | None = None  # the broker configs bounding a number (None: not a number)
    high: str | None = None


def _bounded(kind: str, what: str) -> GroupConfigDef:
    return GroupConfigDef(f"group.{kind}.{what}", f"group.{kind}.min.{what}", f"group.{kind}.max.{what}")


GROUP_CONFIGS: dict[str, GroupConfigDef] = {
    "consumer.session.timeout.ms": _bounded("consumer", "session.timeout.ms"),
    "consumer.heartbeat.interval.ms": _bounded("consumer", "heartbeat.interval.ms"),
    "share.session.timeout.ms": _bounded("share", "session.timeout.ms"),
    "share.heartbeat.interval.ms": _bounded("share", "heartbeat.interval.ms"),
    "share.record.lock.duration.ms": _bounded("share", "record.lock.duration.ms"),
    "share.delivery.count.limit": _bounded("share", "delivery.count.limit"),
    "share.auto.offset.reset": GroupConfigDef("share.auto.offset.reset"),
}


def check(overrides: Mapping[str, str], broker: BrokerGetter) -> None:
    """Refuse overrides that name no group config or lie outside the broker's bounds.

    Raises:
        KafkaError: INVALID_CONFIG.
    """
    for name, raw in overrides.items():
        spec = GROUP_CONFIGS.get(name)
        if spec is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} is not a group config")
        if spec.low is None or spec.high is None:
            if raw not in SHARE_RESETS:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be latest or earliest, not {raw!r}")
            continue
        try:
            number = int(raw)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be a number, not {raw!r}") from None
        low, high = int(broker(spec.low)), int(broker(spec.high))
        if not low <= number <= high:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"{name} must be between {low} ({spec.low}) and {high} ({spec.high})",
            )


def value(overrides: Mapping[str, str], broker: BrokerGetter, name: str) -> str:
    """The config's value for the group: its override, else the broker's default."""
    found = overrides.get(name)
    return found if found is not None else str(broker(GROUP_CONFIGS[name].default))
