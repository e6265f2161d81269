"""The life of one client connection (server.py) as states, with the moves allowed between them.

Theory of operation. One enum member per state, with what the network layer does in it:

* ``AUTHENTICATING`` -- a SASL listener's connection until its login completes (where such a
  connection starts): frames go to the SASL exchange (security/sasl.py, which lets ApiVersions through
  to its handler), at most 512 KiB each.
* ``SERVING`` -- requests go to the handlers (where every other connection starts).
* ``REAUTHENTICATING`` -- KIP-368: an authenticated client started a new SASL exchange; only
  SaslAuthenticate may come until it completes (back to ``SERVING``) or fails.
* ``DRAINING`` -- no more requests are read (the client's EOF, a frame outside the size limits, a
  request Kafka answers by closing, a failed login): those already taken are answered in request order,
  then the connection closes.
* ``CLOSED`` -- the transport is closed or aborted (by the broker or the peer); nothing more is
  written. The end: nothing leaves it.

Allowed moves (``VALID_PREVIOUS[target]``):

| target | from |
|---|---|
| AUTHENTICATING | (start only) |
| SERVING | AUTHENTICATING, REAUTHENTICATING (or the start) |
| REAUTHENTICATING | SERVING |
| DRAINING | AUTHENTICATING, SERVING, REAUTHENTICATING |
| CLOSED | AUTHENTICATING, SERVING, REAUTHENTICATING, DRAINING |

Where a SASL step leaves the connection is `after_sasl_step`, a function of the two states.
Throttling (client quotas, to come) is not a state of this machine: a connection is throttled while it
serves or re-authenticates alike, so it will be a condition beside the state, as the read-ahead bound
(paused reading) is today. Pure data and functions; the driver is server.py's ``_Connection``.
"""

from __future__ import annotations

from enum import Enum

from strom._util.states import check_rule_book, transition
from strom.broker.security.sasl_state import SaslState

__all__ = ["READING", "VALID_PREVIOUS", "ConnectionState", "after_sasl_step", "next_connection_state"]


class ConnectionState(Enum):
    AUTHENTICATING = "authenticating"
    SERVING = "serving"
    REAUTHENTICATING = "re-authenticating"
    DRAINING = "draining"
    CLOSED = "closed"


#: States in which the connection reads requests.
READING = frozenset(
    {ConnectionState.AUTHENTICATING, ConnectionState.SERVING, ConnectionState.REAUTHENTICATING}
)

VALID_PREVIOUS: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.AUTHENTICATING: frozenset(),
    ConnectionState.SERVING: frozenset({ConnectionState.AUTHENTICATING, ConnectionState.REAUTHENTICATING}),
    ConnectionState.REAUTHENTICATING: frozenset({ConnectionState.SERVING}),
    ConnectionState.DRAINING: READING,
    ConnectionState.CLOSED: READING | {ConnectionState.DRAINING},
}
check_rule_book(VALID_PREVIOUS, frozenset({ConnectionState.AUTHENTICATING, ConnectionState.SERVING}))


def next_connection_state(current: ConnectionState, target: ConnectionState) -> ConnectionState:
    """``target`` if the table allows it after ``current``; `RefusedTransition` otherwise."""
    return transition(VALID_PREVIOUS, current, target)


_AFTER_SASL = {
    SaslState.HANDSHAKE: ConnectionState.AUTHENTICATING,
    SaslState.AUTHENTICATE: ConnectionState.AUTHENTICATING,
    SaslState.LEGACY_TOKEN: ConnectionState.AUTHENTICATING,
    SaslState.COMPLETE: ConnectionState.SERVING,
    SaslState.REAUTHENTICATE: ConnectionState.REAUTHENTICATING,
    SaslState.FAILED: ConnectionState.DRAINING,
}


def after_sasl_step(current: ConnectionState, sasl: SaslState) -> ConnectionState:
    """The connection's state once its SASL exchange is in ``sasl`` (unchanged once it stopped
    reading: a connection closed while a failed login was being delayed stays closed)."""
    return _AFTER_SASL[sasl] if current in READING else current
