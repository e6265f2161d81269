"""``strom users create | alter | delete | describe``: SCRAM users (see strom.console.users).

The password is read from ``--password-file`` (first line), or from standard input (prompted without
echo on a terminal); never from the command line, where other users could read it with ps.

``create`` and ``alter`` with ``--zookeeper HOST:PORT`` write the salted credentials straight into
ZooKeeper's ``/config/users/<name>`` (with the change notification brokers watch), as Kafka's
``kafka-configs.sh --zookeeper ... --entity-type users --add-config SCRAM-SHA-512=[password=...]``
does: that is how the brokers' own SCRAM user exists before any broker runs, when brokers log in to
each other with SCRAM.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from strom.cli.commands import client_options
from strom.console.errors import ConsoleError
from strom.console.users import delete_user, print_users, upsert_user


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            lines = Path(args.password_file).read_text().splitlines()
        except OSError as exc:
            reason = exc.strerror
            raise ConsoleError(f"cannot read the password file {args.password_file}: {reason}") from None
        return lines[0] if lines else ""
    if sys.stdin.isatty():
        return getpass.getpass(f"Password for {args.name}: ")
    return sys.stdin.readline().rstrip("\n")


def _upsert_in_zookeeper(args: argparse.Namespace, *, must_exist: bool) -> int:
    # Imported here: every other command works without the broker and cluster packages.
    import asyncio

    from strom.broker.security.scram import HASHES, MIN_ITERATIONS, make_credential
    from strom.cluster.kafka_metadata import KafkaMetadataClient
    from strom.cluster.metadata_store import MetadataStoreError
    from strom.cluster.zookeeper_store import ZooKeeperStore

    mechanisms = [m.upper() for m in args.mechanism] or sorted(HASHES)
    for mechanism in mechanisms:
        if mechanism not in HASHES:
            raise ConsoleError(f"unknown mechanism {mechanism} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    if not MIN_ITERATIONS <= args.iterations <= 16384:
        raise ConsoleError(f"iterations must be {MIN_ITERATIONS}..16384")
    password = _password(args)
    if not password:
        raise ConsoleError("the password is empty")
    loop = asyncio.new_event_loop()  # the client posts watch callbacks to a loop; this one sets none
    zk = KafkaMetadataClient(ZooKeeperStore(args.zookeeper, 10_000, loop))
    try:
        zk.start(timeout_s=args.request_timeout_s)
        existing = {k for k in zk.get_user_config(args.name) if k in HASHES}
        if must_exist and not existing:
            raise ConsoleError(f"user {args.name} has no SCRAM credentials (use 'strom users create')")
        if not must_exist and existing:
            raise ConsoleError(f"user {args.name} already exists (use 'strom users alter')")
        changes: dict[str, str | None] = {
            m: make_credential(m, password, args.iterations).to_kafka() for m in mechanisms
        }
        zk.update_user_config(args.name, changes)
    except MetadataStoreError as exc:
        raise ConsoleError(str(exc)) from None
    finally:
        zk.close()
        loop.close()
    print(f"{'Altered' if must_exist else 'Created'} user {args.name} ({', '.join(mechanisms)}) in ZooKeeper")
    return 0


def _upsert(args: argparse.Namespace, *, must_exist: bool) -> int:
    if args.zookeeper:
        return _upsert_in_zookeeper(args, must_exist=must_exist)
    upsert_user(
        client_options(args),
        args.name,
        _password(args),
        args.mechanism,
        args.iterations,
        must_exist=must_exist,
        out=sys.stdout,
    )
    return 0


def users_create(args: argparse.Namespace) -> int:
    return _upsert(args, must_exist=False)


def users_alter(args: argparse.Namespace) -> int:
    return _upsert(args, must_exist=True)


def users_delete(args: argparse.Namespace) -> int:
    delete_user(client_options(args), args.name, args.mechanism, sys.stdout)
    return 0


def users_describe(args: argparse.Namespace) -> int:
    print_users(client_options(args), args.names, sys.stdout)
    return 0


USERS_HANDLERS = {
    "users_create": users_create,
    "users_alter": users_alter,
    "users_delete": users_delete,
    "users_describe": users_describe,
}


def add_users_commands(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    users = commands.add_parser("users", help="create, alter, delete and describe SCRAM users")
    actions = users.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("create", "create a SCRAM user"), ("alter", "change a SCRAM user's password")):
        sub = actions.add_parser(action, help=text, parents=[parent], allow_abbrev=False)
        sub.add_argument("name")
        sub.add_argument(
            "--mechanism", action="append", default=[], help="SCRAM-SHA-256 or SCRAM-SHA-512 (default both)"
        )
        sub.add_argument("--iterations", type=int, default=8192, help="4096..16384 (default 8192)")
        sub.add_argument("--password-file", metavar="FILE", help="read the password from FILE (else stdin)")
        sub.add_argument(
            "--zookeeper",
            metavar="HOST:PORT",
            help="write straight into this ZooKeeper, no broker needed (e.g. the brokers' own user)",
        )
        sub.set_defaults(handler=f"users_{action}")
    delete = actions.add_parser(
        "delete", help="remove a user's SCRAM credentials", parents=[parent], allow_abbrev=False
    )
    delete.add_argument("name")
    delete.add_argument("--mechanism", action="append", default=[], help="only this mechanism (default all)")
    delete.set_defaults(handler="users_delete")
    describe = actions.add_parser(
        "describe", help="list users and their mechanisms", parents=[parent], allow_abbrev=False
    )
    describe.add_argument("names", nargs="*", metavar="NAME", help="only these users (default all)")
    describe.set_defaults(handler="users_describe")
