"""The states of one connection's SASL exchange and the moves allowed between them (Kafka's
``SaslServerAuthenticator.SaslState``, reduced to what Strom's broker does; driven by sasl.py).

Theory of operation. One enum member per state, with what the broker takes in it:

* ``HANDSHAKE`` -- the start: ApiVersions (answered by its handler) or SaslHandshake naming a mechanism;
  anything else closes the connection.
* ``AUTHENTICATE`` -- SaslHandshake v1+ was accepted: SaslAuthenticate requests carry the mechanism's
  tokens until the exchange completes (PLAIN: one; SCRAM: two).
* ``LEGACY_TOKEN`` -- SaslHandshake v0 was accepted: the tokens travel as bare ``int32 size + bytes``
  frames until the exchange completes.
* ``COMPLETE`` -- authenticated: requests go to the handlers until the session ends
  (``connections.max.reauth.ms``); a client that has used SaslAuthenticate v1+ may start a new
  exchange with SaslHandshake v1+ (KIP-368).
* ``REAUTHENTICATE`` -- that new exchange, same mechanism: only SaslAuthenticate may come, and it must
  end as the same principal.
* ``FAILED`` -- a refused mechanism, wrong credentials, a request out of turn, a session that ended:
  the connection closes after the answer, if any.

Allowed moves (``VALID_PREVIOUS[target]``; ``HANDSHAKE`` is where every connection starts):

| target | from |
|---|---|
| HANDSHAKE | (start only) |
| AUTHENTICATE | HANDSHAKE |
| LEGACY_TOKEN | HANDSHAKE |
| COMPLETE | AUTHENTICATE, LEGACY_TOKEN, REAUTHENTICATE |
| REAUTHENTICATE | COMPLETE |
| FAILED | HANDSHAKE, AUTHENTICATE, LEGACY_TOKEN, COMPLETE, REAUTHENTICATE |

An exchange that takes more than one token (SCRAM) stays in its state between them: no move. Nothing
leaves ``FAILED``. Pure data; `next_sasl_state` is the one way to move.
"""

from __future__ import annotations

from enum import Enum

from strom._util.states import check_rule_book, transition

__all__ = ["IN_EXCHANGE", "VALID_PREVIOUS", "SaslState", "next_sasl_state"]


class SaslState(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    LEGACY_TOKEN = "legacy token"
    COMPLETE = "complete"
    REAUTHENTICATE = "re-authenticate"
    FAILED = "failed"


VALID_PREVIOUS: dict[SaslState, frozenset[SaslState]] = {
    SaslState.HANDSHAKE: frozenset(),
    SaslState.AUTHENTICATE: frozenset({SaslState.HANDSHAKE}),
    SaslState.LEGACY_TOKEN: frozenset({SaslState.HANDSHAKE}),
    SaslState.COMPLETE: frozenset({SaslState.AUTHENTICATE, SaslState.LEGACY_TOKEN, SaslState.REAUTHENTICATE}),
    SaslState.REAUTHENTICATE: frozenset({SaslState.COMPLETE}),
    SaslState.FAILED: frozenset(SaslState) - {SaslState.FAILED},
}
check_rule_book(VALID_PREVIOUS, frozenset({SaslState.HANDSHAKE}))

#: States with an exchange in progress: a mechanism is taking tokens.
IN_EXCHANGE = frozenset({SaslState.AUTHENTICATE, SaslState.LEGACY_TOKEN, SaslState.REAUTHENTICATE})


def next_sasl_state(current: SaslState, target: SaslState) -> SaslState:
    """``target`` if the table allows it after ``current``; `RefusedTransition` otherwise."""
    return transition(VALID_PREVIOUS, current, target)
