"""``strom quotas describe | alter``: client quotas in the words of ``kafka-configs.sh``.

An entity is given as Kafka's tool takes it: ``--entity-type users|clients`` followed by
``--entity-name NAME`` or ``--entity-default``, once per type (both types: a user's client id).
``alter`` takes ``--add-config producer_byte_rate=1048576,consumer_byte_rate=2097152`` and
``--delete-config request_percentage``; ``describe`` lists every quota, or those of the named types
(a type without a name or default: any entity of that type). See strom.console.quotas.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from strom.cli.commands import client_options
from strom.console.errors import ConsoleError
from strom.console.quotas import ENTITY_TYPES, alter, describe, describe_lines, entity_text


class _EntityType(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: Any, opt: Any = None
    ) -> None:
        if value not in ENTITY_TYPES:
            parser.error(f"--entity-type must be users or clients, not {value!r}")
        ns.entities = [*ns.entities, [ENTITY_TYPES[value], None, False]]


class _EntityName(argparse.Action):
    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: Any, opt: Any = None
    ) -> None:
        if not ns.entities or ns.entities[-1][1] is not None or ns.entities[-1][2]:
            parser.error(f"{opt} follows an --entity-type without a name")
        if self.dest == "entity_default":
            ns.entities[-1][2] = True
        else:
            ns.entities[-1][1] = value


def _parse_add(items: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise ConsoleError(f"--add-config takes key=value pairs, not {part!r}")
            try:
                out[key.strip()] = float(value)
            except ValueError:
                raise ConsoleError(f"{key.strip()}: not a number: {value!r}") from None
    return out


def quotas_describe(args: argparse.Namespace) -> int:
    rows = describe(client_options(args), [tuple(e) for e in args.entities], strict=False)
    for line in describe_lines(rows):
        print(line)
    return 0


def quotas_alter(args: argparse.Namespace) -> int:
    if not args.entities:
        raise ConsoleError(
            "name an entity: --entity-type users|clients with --entity-name or --entity-default"
        )
    entity = []
    for kind, name, default in args.entities:
        if name is None and not default:
            raise ConsoleError(f"--entity-type {kind}: give --entity-name NAME or --entity-default")
        entity.append((kind, None if default else name))
    add = _parse_add(args.add_config)
    delete = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not add and not delete:
        raise ConsoleError("nothing to alter: give --add-config or --delete-config")
    alter(client_options(args), entity, add, delete, args.validate_only)
    verb = "Validated" if args.validate_only else "Completed updating"
    print(f"{verb} config for {entity_text(entity)}.")
    return 0


QUOTAS_HANDLERS = {"quotas_describe": quotas_describe, "quotas_alter": quotas_alter}


def _entity_options(sub: argparse.ArgumentParser) -> None:
    sub.set_defaults(entities=[])
    sub.add_argument("--entity-type", action=_EntityType, metavar="users|clients", help="an entity type")
    sub.add_argument("--entity-name", action=_EntityName, metavar="NAME", help="the entity's name")
    sub.add_argument(
        "--entity-default", action=_EntityName, nargs=0, help="the default entity of the type before it"
    )


def add_quotas_commands(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    quotas = commands.add_parser("quotas", help="describe and alter client quotas (users, client ids)")
    actions = quotas.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe_cmd = actions.add_parser(
        "describe", help="list client quotas", parents=[parent], allow_abbrev=False
    )
    _entity_options(describe_cmd)
    describe_cmd.set_defaults(handler="quotas_describe")
    alter_cmd = actions.add_parser(
        "alter", help="set or remove client quotas", parents=[parent], allow_abbrev=False
    )
    _entity_options(alter_cmd)
    alter_cmd.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    alter_cmd.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    alter_cmd.add_argument("--validate-only", action="store_true", help="check without changing anything")
    alter_cmd.set_defaults(handler="quotas_alter")
