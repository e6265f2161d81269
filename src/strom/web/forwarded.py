"""Whose request a broker forwards: the principal a registry write carries to the writer.

Theory of operation
-------------------
A registry write (or a read that missed) reaching a broker that is not the registry writer is forwarded
to the writer over HTTP (`strom.web.registry_api`), and the writer authorizes it again. A user who logged
in with HTTP Basic is forwarded with the same ``Authorization`` header: the writer checks the same password.
A user who logged in with a client certificate has nothing the forwarding broker could pass on (the TLS
session ends at that broker), so, as Confluent's registry does when it forwards to its leader, the
forwarding broker names the user: the forward logs in *as the broker* and carries

* ``X-Strom-Principal``: the user's principal (``User:CN=carol,O=Acme``), percent-encoded UTF-8, and
* ``X-Strom-Client-Host``: the user's IP address, for ACLs that name hosts.

It does so only with an authorizer configured: without ACLs the writer asks only for a login, which the
broker's certificate is, and the principal decides nothing.

The broker's own login is its inter-broker one: HTTP Basic with the ``username``/``password`` of the
inter-broker listener's SASL JAAS login (which the writer checks as any Basic login, against the PLAIN
``user_<name>`` entries or the SCRAM credentials), or, without SASL, the client certificate of its key
store on an ``https://`` writer that asks for one.

Nobody else can name a principal: the writer honours the headers only from a request that itself logged
in as a broker (`speaks_for_others`): the inter-broker user, or a principal of ``super.users`` (with ACLs
on, Kafka's brokers are super users; a super user naming another user can only lose rights by it). A
request from anyone else that carries ``X-Strom-Principal`` is refused with 403, so a forgery is never
silently served as its sender either.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

PRINCIPAL_HEADER = "X-Strom-Principal"
CLIENT_HOST_HEADER = "X-Strom-Client-Host"


def broker_principals(super_users: frozenset[str], inter_broker_user: str) -> frozenset[str]:
    """The logins whose requests may name another principal: ``super.users`` and the inter-broker user."""
    return super_users | ({f"User:{inter_broker_user}"} if inter_broker_user else set())


def speaks_for_others(login: str, brokers: frozenset[str]) -> bool:
    """Whether a request that logged in as ``login`` may carry `PRINCIPAL_HEADER`."""
    return login in brokers


def encode_principal(principal: str) -> str:
    """A principal as a header value (DNs may hold any Unicode; headers are Latin-1)."""
    return quote(principal, safe=":=,@ /+")


def decode_principal(value: str) -> str | None:
    """The principal a `PRINCIPAL_HEADER` names; None if it is not ``Type:name``."""
    principal = unquote(value.strip())
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return None
    return principal
