"""kafka-python's ``KafkaAdminClient`` for the admin APIs confluent-kafka 2.16 does not expose.

confluent-kafka's AdminClient has no ListTransactions, DescribeTransactions, DescribeProducers,
AlterPartitionReassignments or ListPartitionReassignments; kafka-python (already a dependency: Strom
builds its codecs from the message specs it ships) has them all and routes each as Kafka's own admin
client does (the controller, a coordinator, a partition's leader). ``strom transactions`` and
``strom topics reassign`` use it through this module, which opens the client from the CLI's global
options and turns its errors into one-line :class:`ConsoleError` messages.

A request kafka-python sends to an arbitrary broker (Metadata, finding the controller) goes to one it
picks at random among those Metadata lists, alive or not: a broker that is down (connection refused) or
hung (no answer) fails the call although the others would answer. Reassigning partitions away from
such a broker is exactly when these tools are needed, so a call that failed that way is tried again,
up to ``ATTEMPTS`` times in all; kafka-python keeps a node that just failed in reconnect backoff, so the
next attempt goes elsewhere.

``--command-config`` holds librdkafka property names, which kafka-python does not read; it is refused
rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kafka.admin import KafkaAdminClient
from kafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
)
from kafka.errors import KafkaError as KafkaPythonError

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.protocol.errors import ErrorCode

T = TypeVar("T")

ATTEMPTS = 3
#: Failures that say nothing about the request, only about the broker it went to.
_UNANSWERED = (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError, KafkaTimeoutError)


@contextmanager
def kafka_admin(options: ClientOptions, command: str) -> Iterator[KafkaAdminClient]:
    """A connected client (``client_id`` ``strom-<command>``), closed on exit."""
    if options.command_config:
        raise ConsoleError(f"--command-config (librdkafka properties) does not apply to strom {command}")
    timeout_ms = int(options.timeout_s * 1000)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=options.bootstrap_servers.split(","),
            client_id=f"strom-{command.replace(' ', '-')}",
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
        )
    except KafkaTimeoutError:
        raise ConsoleError(
            f"no broker reachable at {options.bootstrap_servers} within {options.timeout_s:g}s"
        ) from None
    except KafkaPythonError as exc:
        raise ConsoleError(f"connect to {options.bootstrap_servers}: {error_text(exc)}") from None
    try:
        yield admin
    finally:
        admin.close()


def admin_call(
    options: ClientOptions,
    what: str,
    fn: Callable[[], T],
    passthrough: tuple[type[KafkaPythonError], ...] = (),
) -> T:
    """``fn()``, with a kafka-python error turned into ``what: <error> (brokers: ...)``.

    Errors of the ``passthrough`` types are raised unchanged, for a caller that expects them. A call
    that got no answer (``_UNANSWERED``) is tried again, ``ATTEMPTS`` times in all.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return fn()
        except passthrough:
            raise
        except _UNANSWERED as exc:
            if attempt == ATTEMPTS:
                raise ConsoleError(
                    f"{what}: {error_text(exc)} (brokers: {options.bootstrap_servers})"
                ) from None
        except KafkaPythonError as exc:
            raise ConsoleError(f"{what}: {error_text(exc)} (brokers: {options.bootstrap_servers})") from None
    raise AssertionError("unreachable")  # the loop returns or raises


def error_text(exc: BaseException | type[BaseException]) -> str:
    """One line for a kafka-python error instance, or for the error class a per-partition result holds.

    A class is shown as ``description (NAME)`` with Kafka's name for its error code (kafka-python names
    some codes differently, e.g. INVALID_REPLICATION_ASSIGNMENT for Kafka's INVALID_REPLICA_ASSIGNMENT).
    """
    if isinstance(exc, type):
        errno = getattr(exc, "errno", None)
        try:
            name = ErrorCode(errno).name if isinstance(errno, int) else exc.__name__
        except ValueError:
            name = exc.__name__
        description = getattr(exc, "description", "")
        return f"{description} ({name})" if isinstance(description, str) and description else name
    name = type(exc).__name__
    message = str(exc).split(": ", 1)[-1] if str(exc) else ""
    return f"{name}: {message}" if message and message != name else name
