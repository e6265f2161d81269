"""``strom acls list | add | remove``: the argument layout of Kafka's ``kafka-acls.sh`` (see
strom.console.acls for the semantics)."""

from __future__ import annotations

import argparse
import sys

from strom.cli.commands import client_options
from strom.console.acls import AclArgs, add_acls, list_acls, remove_acls


def _acl_args(args: argparse.Namespace) -> AclArgs:
    return AclArgs(
        topics=args.topic,
        groups=args.group,
        transactional_ids=args.transactional_id,
        subjects=args.subject,
        cluster=args.cluster,
        pattern_type=args.resource_pattern_type,
        allow_principals=getattr(args, "allow_principal", []),
        deny_principals=getattr(args, "deny_principal", []),
        allow_hosts=getattr(args, "allow_host", []),
        deny_hosts=getattr(args, "deny_host", []),
        operations=args.operation,
        principal=getattr(args, "principal", None),
    )


def acls_list(args: argparse.Namespace) -> int:
    list_acls(client_options(args), _acl_args(args), sys.stdout)
    return 0


def acls_add(args: argparse.Namespace) -> int:
    add_acls(client_options(args), _acl_args(args), sys.stdout)
    return 0


def acls_remove(args: argparse.Namespace) -> int:
    remove_acls(client_options(args), _acl_args(args), sys.stdout)
    return 0


ACLS_HANDLERS = {"acls_list": acls_list, "acls_add": acls_add, "acls_remove": acls_remove}


def _resource_options(parser: argparse.ArgumentParser, default_pattern: str) -> None:
    parser.add_argument("--topic", action="append", default=[], metavar="NAME")
    parser.add_argument("--group", action="append", default=[], metavar="NAME")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    parser.add_argument(
        "--subject", action="append", default=[], metavar="NAME", help="a schema registry subject (Strom's)"
    )
    parser.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    parser.add_argument(
        "--resource-pattern-type",
        default=default_pattern,
        metavar="TYPE",
        help=f"literal, prefixed (list/remove also: any, match); default {default_pattern}",
    )
    parser.add_argument(
        "--operation", action="append", default=[], metavar="OP", help="Read, Write, Describe, All, ..."
    )


def _entry_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST")


def add_acls_commands(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    acls = commands.add_parser("acls", help="list, add and remove ACLs (kafka-acls.sh vocabulary)")
    actions = acls.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="ACLs, all or matching", parents=[parent], allow_abbrev=False)
    _resource_options(listing, "any")
    listing.add_argument("--principal", metavar="TYPE:NAME", help="only this principal's ACLs")
    listing.set_defaults(handler="acls_list")
    add = actions.add_parser("add", help="grant or deny operations", parents=[parent], allow_abbrev=False)
    _resource_options(add, "literal")
    _entry_options(add)
    add.set_defaults(handler="acls_add")
    remove = actions.add_parser("remove", help="remove matching ACLs", parents=[parent], allow_abbrev=False)
    _resource_options(remove, "literal")
    _entry_options(remove)
    remove.set_defaults(handler="acls_remove")
