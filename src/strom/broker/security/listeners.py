"""Named listeners, as Kafka configures them (pure parsing, no sockets).

``listeners=CLIENT://0.0.0.0:9093,INTERNAL://127.0.0.1:9094`` names each listener; its security
protocol comes from ``listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SSL``. Unset, the map is
Kafka's default, in which each of the four protocol names maps to itself (so ``SSL://host:port`` is an
SSL listener). ``advertised.listeners`` gives, per listener name, the address clients are told
(default: the listener's own; a bound host of ``0.0.0.0`` is advertised as ``localhost``; port 0 is
replaced by the port actually bound). Brokers talk to each other over ``inter.broker.listener.name``,
or, when that is unset, over the listener named after ``security.inter.broker.protocol`` (default
PLAINTEXT); setting both is an error, as in Kafka.

Listener names are case-insensitive on input and kept upper-case, as Kafka does; the per-listener
overrides (``listener.name.<name>.<config>``) use the lower-case name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strom._util.errors import ConfigError


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP = {p.value: p for p in SecurityProtocol}


@dataclass(frozen=True, slots=True)
class Listener:
    name: str  # upper-case, as Kafka keeps it
    protocol: SecurityProtocol
    host: str
    port: int

    @property
    def prefix(self) -> str:
        """Kafka's per-listener config prefix: ``listener.name.<lower-case name>.``."""
        return f"listener.name.{self.name.lower()}."


@dataclass(frozen=True, slots=True)
class ListenerSetup:
    listeners: tuple[Listener, ...]
    advertised: Mapping[str, tuple[str, int]]  # listener name -> (host, port; 0 = the bound port)
    inter_broker: str  # the listener name brokers use to reach each other

    def listener(self, name: str) -> Listener:
        for item in self.listeners:
            if item.name == name:
                return item
        raise KeyError(name)


def split_address(text: str, what: str) -> tuple[str, str, int]:
    """``NAME://host:port`` → (NAME upper-cased, host, port); ``[::1]`` loses its brackets."""
    name, sep, rest = text.partition("://")
    if not sep or not name:
        raise ConfigError(f"{what} {text!r} is not of the form NAME://host:port")
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{what} {text!r} has no valid port")
    return name.upper(), host.strip("[]"), int(port)


def parse_protocol_map(raw: str | None) -> dict[str, SecurityProtocol]:
    if raw is None:
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, SecurityProtocol] = {}
    for part in raw.split(","):
        item = part.strip()
        if not item:
            continue
        name, sep, proto = item.partition(":")
        try:
            protocol = SecurityProtocol(proto.strip().upper())
        except ValueError:
            raise ConfigError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(p.value for p in SecurityProtocol)}"
            ) from None
        if not sep or not name.strip():
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        out[name.strip().upper()] = protocol
    return out


def parse_listener_setup(
    listeners: Sequence[str],
    advertised: Sequence[str] | None,
    protocol_map: str | None,
    inter_broker_listener_name: str | None,
    inter_broker_protocol: str | None,
) -> ListenerSetup:
    """Validate Kafka's listener settings as a whole (raises ConfigError naming the setting)."""
    protocols = parse_protocol_map(protocol_map)
    parsed: list[Listener] = []
    ports: set[int] = set()
    for text in listeners:
        name, host, port = split_address(text, "listener")
        if name not in protocols:
            raise ConfigError(
                f"listener {text!r}: no security protocol for {name} in listener.security.protocol.map"
            )
        if any(item.name == name for item in parsed):
            raise ConfigError(f"listeners: the name {name} is used twice")
        if port and port in ports:
            raise ConfigError(f"listeners: the port {port} is used twice")
        ports.add(port)
        parsed.append(Listener(name, protocols[name], host or "0.0.0.0", port))
    if not parsed:
        raise ConfigError("listeners: at least one listener is needed")
    names = {item.name for item in parsed}
    adv: dict[str, tuple[str, int]] = {}
    for text in advertised or ():
        name, host, port = split_address(text, "advertised listener")
        if name not in names:
            raise ConfigError(
                f"advertised.listeners: {name} is not one of the listeners ({', '.join(names)})"
            )
        adv[name] = (host, port)
    for item in parsed:
        adv.setdefault(item.name, (item.host, item.port))
    if inter_broker_listener_name and inter_broker_protocol:
        raise ConfigError("set only one of inter.broker.listener.name and security.inter.broker.protocol")
    if inter_broker_listener_name:
        inter = inter_broker_listener_name.strip().upper()
        if inter not in names:
            raise ConfigError(f"inter.broker.listener.name={inter} is not one of the listeners")
    elif inter_broker_protocol:
        inter = inter_broker_protocol.strip().upper()
        if inter not in names:
            raise ConfigError(
                f"security.inter.broker.protocol={inter}: no listener of that name; "
                "name one with inter.broker.listener.name"
            )
    elif len(parsed) == 1:
        inter = parsed[0].name  # Strom: a lone listener serves brokers too, whatever its name
    else:
        inter = "PLAINTEXT"
        if inter not in names:
            raise ConfigError("several listeners and none named PLAINTEXT: set inter.broker.listener.name")
    return ListenerSetup(tuple(parsed), adv, inter)


def principal_name(user: str) -> str:
    """Kafka's principal string for an authenticated user name."""
    return f"User:{user}"


ANONYMOUS = "User:ANONYMOUS"
