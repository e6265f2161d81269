"""``strom users create | alter | delete | describe``: SCRAM users (see strom.console.users).

The password is read from ``--password-file`` (first line), or from standard input (prompted without
echo on a terminal); never from the command line, where other users could read it with ps.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from strom.cli.commands import client_options
from strom.console.users import delete_user, print_users, upsert_user


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        lines = Path(args.password_file).read_text().splitlines()
        return lines[0] if lines else ""
    if sys.stdin.isatty():
        return getpass.getpass(f"Password for {args.name}: ")
    return sys.stdin.readline().rstrip("\n")


def users_create(args: argparse.Namespace) -> int:
    upsert_user(
        client_options(args),
        args.name,
        _password(args),
        args.mechanism,
        args.iterations,
        must_exist=False,
        out=sys.stdout,
    )
    return 0


def users_alter(args: argparse.Namespace) -> int:
    upsert_user(
        client_options(args),
        args.name,
        _password(args),
        args.mechanism,
        args.iterations,
        must_exist=True,
        out=sys.stdout,
    )
    return 0


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
