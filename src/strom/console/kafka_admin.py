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

kafka-python retries a bootstrap whose SASL login was refused until its timeout, like a broker that is
down. A wrong password should not look like that, nor take that long: the client is built in a thread
of its own while a handler on kafka-python's logger watches what it reports (`_FailureWatch`); the
first refused login ends the command at once, and a bootstrap that times out names the last failure
seen (a TLS handshake refused, say).

``--command-config`` holds librdkafka property names, which kafka-python does not read: its security
properties (TLS, SASL) are translated (`strom.console.kafka_python_security`), any other is refused by
name rather than silently ignored.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kafka.admin import KafkaAdminClient
from kafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
)
from kafka.errors import KafkaError as KafkaPythonError
from kafka.net.connection import KafkaConnection
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from strom.console.clients import ClientOptions
from strom.console.errors import ConsoleError
from strom.console.kafka_python_security import UnsupportedProperty, kafka_python_security, named_files
from strom.protocol.errors import ErrorCode

T = TypeVar("T")

ATTEMPTS = 3
#: Failures that say nothing about the request, only about the broker it went to.
_UNANSWERED = (KafkaConnectionError, NodeNotReadyError, RequestTimedOutError, KafkaTimeoutError)


@contextmanager
def kafka_admin(options: ClientOptions, command: str) -> Iterator[KafkaAdminClient]:
    """A connected client (``client_id`` ``strom-<command>``), closed on exit."""
    try:
        security = kafka_python_security(options.command_config)
    except UnsupportedProperty as exc:
        raise ConsoleError(str(exc)) from None
    for key, path in named_files(options.command_config):
        if not os.path.isfile(path):
            raise ConsoleError(f"--command-config {key}={path}: no such file")
    timeout_ms = int(options.timeout_s * 1000)
    admin = _connect(
        options,
        bootstrap_servers=options.bootstrap_servers.split(","),
        client_id=f"strom-{command.replace(' ', '-')}",
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=timeout_ms,
        **security,
    )
    try:
        yield admin
    finally:
        admin.close()


class _FailureWatch(logging.Handler):
    """Watches kafka-python's log records (the objects they carry, not their text) while it connects;
    ``refused`` is set at the first sign that the broker refused the SASL login (from its I/O thread).

    Two signs: a SaslAuthenticationFailedError (the broker's answer, with its reason), or a connection
    lost while a SaslAuthenticate request was unanswered. The second is how most refusals look:
    the broker answers and closes (as Kafka does), and kafka-python 3.0 drops bytes that arrive with
    the end of the stream, so it sees only ``socket disconnected``.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.refused = threading.Event()
        self.reason = ""
        self.last_failure: BaseException | None = None
        self._authenticating: set[KafkaConnection] = set()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        conn = next((a for a in args if isinstance(a, KafkaConnection)), None)
        for arg in args:
            if conn is not None and isinstance(arg, SaslAuthenticateRequest):
                self._authenticating.add(conn)
            elif conn is not None and isinstance(arg, SaslAuthenticateResponse):
                self._authenticating.discard(conn)
            elif isinstance(arg, SaslAuthenticationFailedError):
                # kafka-python names the class twice ("[Error 58] SaslAuthentication...: Sasl...: why")
                self._refuse(str(arg).rsplit(f"{SaslAuthenticationFailedError.__name__}: ", 1)[-1])
            elif isinstance(arg, BaseException) and not isinstance(arg, KafkaTimeoutError):
                self.last_failure = arg
                if conn is not None and conn in self._authenticating:
                    self._refuse("the connection was closed during the SASL exchange (wrong credentials?)")

    def _refuse(self, reason: str) -> None:
        if not self.refused.is_set():
            self.reason = reason
            self.refused.set()


def _connect(options: ClientOptions, **configs: Any) -> KafkaAdminClient:
    watch = _FailureWatch()
    logger = logging.getLogger("kafka")
    built: list[KafkaAdminClient | BaseException] = []
    done = threading.Event()

    def build() -> None:
        try:
            built.append(KafkaAdminClient(**configs))
        except BaseException as exc:  # handed to the waiting thread
            built.append(exc)
        done.set()
        watch.refused.set()  # wakes the waiting thread

    level = logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.DEBUG)  # the request and response records carry what `watch` looks for
    try:
        # A daemon thread: abandoned after a refused login, it must not keep the CLI alive.
        threading.Thread(target=build, name="strom-kafka-admin-connect", daemon=True).start()
        watch.refused.wait()
    finally:
        logger.setLevel(level)
        logger.removeHandler(watch)
    where = options.bootstrap_servers
    if not done.is_set():
        raise ConsoleError(f"SASL authentication refused by {where}: {watch.reason}")
    (result,) = built
    if isinstance(result, KafkaAdminClient):
        return result
    if isinstance(result, KafkaTimeoutError):
        seen = watch.last_failure
        last = f" (last failure: {error_text(seen)})" if seen is not None else ""
        raise ConsoleError(f"no broker reachable at {where} within {options.timeout_s:g}s{last}")
    if isinstance(result, KafkaPythonError):
        raise ConsoleError(f"connect to {where}: {error_text(result)}")
    if isinstance(result, OSError):  # e.g. ssl.ca.location names no readable PEM file
        raise ConsoleError(f"connect to {where}: {result}")
    raise result


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
