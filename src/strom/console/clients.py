"""Client configuration and error translation shared by the console tools.

Every console tool talks to brokers only through confluent-kafka (librdkafka). This module builds their
configuration dictionaries from the CLI's global options, keeps librdkafka's own log lines off the
terminal unless asked for (they are multi-line, repetitive and would drown the one-line error the CLI
promises), and turns librdkafka's errors and timeouts into :class:`ConsoleError`.

Threading: librdkafka delivers logs and callbacks on the thread that calls ``poll``/``flush``; all
console tools are single-threaded.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from confluent_kafka import KafkaError, KafkaException

from strom.console.errors import ConsoleError

T = TypeVar("T")

ConfigValue = str | int | float | bool
#: librdkafka properties, as every confluent-kafka client takes them (the logger is a keyword apart).
ClientConfig = dict[str, ConfigValue]

#: librdkafka log lines go to this logger (passed to every client as ``logger=``); the CLI attaches a
#: stderr handler only with --verbose.
LIBRDKAFKA_LOGGER = logging.getLogger("strom.console.librdkafka")

# librdkafka error codes (negative = client-side) that mean no connection could be made.
_UNREACHABLE_CODES = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE})


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """The global connection options every console tool receives.

    Attributes:
        bootstrap_servers: ``host:port[,host:port...]`` passed to librdkafka as ``bootstrap.servers``.
        command_config: extra librdkafka properties (``--command-config k=v``), applied to every client.
        timeout_s: upper bound for each metadata or admin request made by the tool.
    """

    bootstrap_servers: str
    command_config: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0

    def config(self, **overrides: ConfigValue) -> ClientConfig:
        """Return a librdkafka configuration: defaults, then ``overrides``, then ``--command-config``.

        The user's ``--command-config`` wins over everything, so any default chosen by a tool can be
        changed without a new flag. Clients are created with ``logger=LIBRDKAFKA_LOGGER`` beside it.
        """
        conf: ClientConfig = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(overrides)
        conf.update(self.command_config)
        return conf


def parse_key_values(items: Iterable[str], what: str) -> dict[str, str]:
    """Parse ``key=value`` strings (later duplicates win).

    Args:
        items: the raw strings, e.g. from a repeated ``--config`` option.
        what: the option name used in the error message (``"--config"``).

    Raises:
        ConsoleError: an item has no ``=`` or an empty key.
    """
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConsoleError(f"{what} expects key=value, got {item!r}")
        parsed[key.strip()] = value
    return parsed


def describe_kafka_error(error: object) -> str:
    """One line for a librdkafka error: a KafkaError, a KafkaException wrapping one, or anything else."""
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    if isinstance(error, KafkaError):
        return kafka_error_text(error)
    return str(error) or type(error).__name__


def kafka_error_text(err: KafkaError) -> str:
    """Format a :class:`KafkaError` as ``message (NAME)``."""
    text = err.str() or err.name()
    return text if err.name() in text else f"{text} ({err.name()})"


def _error_code(exc: BaseException) -> int | None:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def unreachable(exc: BaseException) -> bool:
    """Whether a client call failed because no broker answered (not because a broker said no)."""
    return _error_code(exc) in _UNREACHABLE_CODES or _error_code(exc) == KafkaError._TIMED_OUT


def fail(what: str, exc: BaseException, options: ClientOptions) -> ConsoleError:
    """Build the ConsoleError for a failed client call, with a hint when no broker answered."""
    text = f"{what}: {describe_kafka_error(exc)}"
    code = _error_code(exc)
    if code in _UNREACHABLE_CODES:
        text += f" (is a broker reachable at {options.bootstrap_servers}?)"
    elif code == KafkaError._TIMED_OUT:
        # Either nothing is listening or the broker ignores this request; say only what is known.
        text += f" (no answer from {options.bootstrap_servers} within {options.timeout_s:g}s)"
    return ConsoleError(text)


def wait(future: concurrent.futures.Future[T], what: str, options: ClientOptions) -> T:
    """Wait for an AdminClient future, converting errors and timeouts to :class:`ConsoleError`.

    The admin calls are also given ``request_timeout=options.timeout_s``; the extra second here only
    guards against a future librdkafka never completes.
    """
    try:
        return future.result(timeout=options.timeout_s + 1.0)
    except concurrent.futures.TimeoutError:
        raise ConsoleError(
            f"{what}: no answer within {options.timeout_s:g}s from {options.bootstrap_servers}"
        ) from None
    except KafkaException as exc:
        raise fail(what, exc, options) from None


def print_table(rows: list[list[str]], out: TextIO) -> None:
    """Rows (the header first) as left-aligned columns two spaces apart."""
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(), file=out
        )
