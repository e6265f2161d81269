"""``strom configs describe | alter``: broker configs, log levels and groups' configs in the words of
``kafka-configs.sh`` (``--entity-type brokers --entity-name 0 | --entity-default``, ``--entity-type
broker-loggers --entity-name 0``, ``--entity-type groups --entity-name G`` or ``--group G``,
``--add-config k=v[,k=v]``, ``--delete-config k[,k]``). See strom.console.configs;
client quotas are ``strom quotas``, topic configs ``strom topics``."""

from __future__ import annotations

import argparse

from strom.cli.commands import client_options
from strom.console.configs import BROKER, ENTITY_TYPES, GROUP, alter, describe, entity_text
from strom.console.errors import ConsoleError


def _resource(args: argparse.Namespace) -> tuple[int, str]:
    if args.group is not None:
        if args.entity_type not in (None, "groups"):
            raise ConsoleError("--group is for --entity-type groups")
        return GROUP, args.group
    if args.entity_type is None:
        raise ConsoleError("give --entity-type (or --group G)")
    resource_type = ENTITY_TYPES[args.entity_type]
    if args.entity_default:
        if resource_type != BROKER:
            raise ConsoleError("--entity-default is for --entity-type brokers")
        return resource_type, ""
    if args.entity_name is None:
        raise ConsoleError("give --entity-name NAME or --entity-default")
    return resource_type, args.entity_name


def configs_describe(args: argparse.Namespace) -> int:
    resource_type, name = _resource(args)
    for line in describe(client_options(args), resource_type, name, args.all):
        print(line)
    return 0


def configs_alter(args: argparse.Namespace) -> int:
    resource_type, name = _resource(args)
    add: dict[str, str] = {}
    for item in args.add_config:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ConsoleError(f"--add-config takes key=value pairs, not {part!r}")
            add[key.strip()] = value.strip()
    delete = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not add and not delete:
        raise ConsoleError("nothing to alter: give --add-config or --delete-config")
    alter(client_options(args), resource_type, name, add, delete)
    default = "default " if name == "" else ""
    print(f"Completed updating {default}config for {entity_text(resource_type, name)}.")
    return 0


CONFIGS_HANDLERS = {"configs_describe": configs_describe, "configs_alter": configs_alter}


def add_configs_commands(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
    configs = commands.add_parser(
        "configs", help="describe and alter broker configs, log levels and groups' configs"
    )
    actions = configs.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("describe", "show a broker's configs"), ("alter", "change broker configs")):
        sub = actions.add_parser(action, help=text, parents=[parent], allow_abbrev=False)
        sub.add_argument("--entity-type", choices=sorted(ENTITY_TYPES))
        which = sub.add_mutually_exclusive_group()
        which.add_argument("--entity-name", metavar="NAME", help="a broker id, a logger's broker, a group")
        which.add_argument("--entity-default", action="store_true", help="the cluster-wide default")
        which.add_argument("--group", metavar="G", help="a group's configs (--entity-type groups)")
        if action == "describe":
            sub.add_argument("--all", action="store_true", help="every config, not only dynamic ones")
        else:
            sub.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
            sub.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
        sub.set_defaults(handler=f"configs_{action}")
