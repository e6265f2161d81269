"""``strom users``: SCRAM users (KIP-554) through the broker's AlterUserScramCredentials and
DescribeUserScramCredentials, as Kafka's ``kafka-configs.sh --entity-type users`` manages them.

The client salts and iterates the password (confluent-kafka's AdminClient: a random salt and
PBKDF2-HMAC); the broker stores only the derived keys. ``create`` refuses a user that already has
credentials and ``alter`` one that has none; ``delete`` removes the named mechanisms (default: all the
user has). Output of ``describe``: ``User: <name>\\tMechanism: <mechanism>\\tIterations: <n>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, TextIO

# Not in confluent_kafka.admin's __all__ (see console/_admin_api.py).
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from strom.console.clients import ClientOptions, wait
from strom.console.errors import ConsoleError
from strom.console.topics import admin_client

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


def _mechanisms(names: Sequence[str]) -> list[str]:
    chosen = [n.upper() for n in names] or list(MECHANISMS)
    for name in chosen:
        if name not in MECHANISMS:
            raise ConsoleError(f"unknown mechanism {name} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    return chosen


def describe_users(options: ClientOptions, users: Sequence[str]) -> dict[str, dict[str, int]]:
    """user -> mechanism -> iterations (all users when ``users`` is empty)."""
    admin = admin_client(options)
    result = admin.describe_user_scram_credentials(list(users) or None, request_timeout=options.timeout_s)
    futures: dict[str, Future[Any]] = result if isinstance(result, dict) else {"": result}
    out: dict[str, dict[str, int]] = {}
    for name, future in futures.items():
        found = wait(future, f"describing user {name}" if name else "describing users", options)
        descriptions = found if isinstance(found, dict) else {name: found}
        for user, description in descriptions.items():
            out[user] = {
                info.mechanism.name.replace("_", "-"): info.iterations
                for info in description.scram_credential_infos
            }
    return out


def print_users(options: ClientOptions, users: Sequence[str], out: TextIO) -> None:
    for user, mechs in sorted(describe_users(options, users).items()):
        for mechanism, iterations in sorted(mechs.items()):
            out.write(f"User: {user}\tMechanism: {mechanism}\tIterations: {iterations}\n")


def upsert_user(
    options: ClientOptions,
    user: str,
    password: str,
    mechanisms: Sequence[str],
    iterations: int,
    *,
    must_exist: bool,
    out: TextIO,
) -> None:
    if not password:
        raise ConsoleError("the password is empty")
    exists = bool(_existing(options, user))
    if must_exist and not exists:
        raise ConsoleError(f"user {user} has no SCRAM credentials (use 'strom users create')")
    if not must_exist and exists:
        raise ConsoleError(f"user {user} already exists (use 'strom users alter')")
    admin = admin_client(options)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[m], iterations), password.encode())
        for m in _mechanisms(mechanisms)
    ]
    futures = admin.alter_user_scram_credentials(upserts, request_timeout=options.timeout_s)
    wait(futures[user], f"setting credentials of {user}", options)
    out.write(
        f"{'Altered' if must_exist else 'Created'} user {user} ({', '.join(_mechanisms(mechanisms))})\n"
    )


def delete_user(options: ClientOptions, user: str, mechanisms: Sequence[str], out: TextIO) -> None:
    existing = _existing(options, user)
    chosen = [m.upper() for m in mechanisms] or sorted(existing)
    if not chosen:
        raise ConsoleError(f"user {user} has no SCRAM credentials")
    admin = admin_client(options)
    deletions: list[UserScramCredentialAlteration] = [
        UserScramCredentialDeletion(user, MECHANISMS[m]) for m in _mechanisms(chosen)
    ]
    futures = admin.alter_user_scram_credentials(deletions, request_timeout=options.timeout_s)
    wait(futures[user], f"deleting credentials of {user}", options)
    out.write(f"Deleted {', '.join(chosen)} credentials of user {user}\n")


def _existing(options: ClientOptions, user: str) -> dict[str, int]:
    try:
        return describe_users(options, [user]).get(user, {})
    except ConsoleError as exc:
        if "RESOURCE_NOT_FOUND" in exc.message or "no SCRAM credentials" in exc.message:
            return {}
        raise
