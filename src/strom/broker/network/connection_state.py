"""The life of one client connection (server.py) as states, with the moves allowed between them.

Theory of operation. One enum member per state, with what the network layer does in it:

* ``AUTHENTICATING`` -- a SASL listener's connection until its login completes (where such a
  connection starts): frames go to the SASL exchange (security/sasl.py, which lets ApiVersions through
  to its handler), at most 512 KiB each.
* ``SERVING`` -- requests go to the handlers (where every other connection starts).
* ``THROTTLED`` -- a response earned a client-quota throttle time (KIP-219): the broker stops reading
  the connection (its transport is paused and the next request waits) until that time has passed,
  then it serves again. Frames already received are kept for then.
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
| SERVING | AUTHENTICATING, REAUTHENTICATING, THROTTLED (or the start) |
| THROTTLED | SERVING |
| REAUTHENTICATING | SERVING |
| DRAINING | AUTHENTICATING, SERVING, THROTTLED, REAUTHENTICATING |
| CLOSED | AUTHENTICATING, SERVING, THROTTLED, REAUTHENTICATING, DRAINING |

Where a SASL step leaves the connection is `after_sasl_step`, a function of the two states.
Only a serving connection is throttled (requests that earn a throttle are served ones; a
re-authentication carries none). A throttled connection still counts as reading (``READING``): its
end of input moves it to DRAINING as from SERVING. The read-ahead bound (paused reading while too much
is unanswered) is not a state but a condition beside it. Pure data and functions; the driver is
server.py's ``_Connection``.
"""

from __future__ import annotations

from enum import Enum

from strom._util.states import check_rule_book, transition
from strom.broker.security.sasl_state import SaslState

__all__ = ["READING", "VALID_PREVIOUS", "ConnectionState", "after_sasl_step", "next_connection_state"]


class ConnectionState(Enum):
    AUTHENTICATING = "authenticating"
    SERVING = "serving"
    THROTTLED = "throttled"
    REAUTHENTICATING = "re-authenticating"
    DRAINING = "draining"
    CLOSED = "closed"


#: States in which the connection reads requests.
READING = frozenset(
    {
        ConnectionState.AUTHENTICATING,
        ConnectionState.SERVING,
        ConnectionState.THROTTLED,
        ConnectionState.REAUTHENTICATING,
    }
)

VALID_PREVIOUS: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.AUTHENTICATING: frozenset(),
    ConnectionState.SERVING: frozenset(
        {ConnectionState.AUTHENTICATING, ConnectionState.REAUTHENTICATING, ConnectionState.THROTTLED}
    ),
    ConnectionState.THROTTLED: frozenset({ConnectionState.SERVING}),
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
