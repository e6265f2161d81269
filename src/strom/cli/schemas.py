"""``strom schemas list|versions|get|register|check|config|delete``: the schema registry from the shell.

The registry is any broker's HTTP listener: ``--registry URL`` (default ``$STROM_SCHEMA_REGISTRY`` or
``http://localhost:8081``). Output is plain text for people (one subject, version or id per line;
schemas as JSON); errors are one line (`ConsoleError`), exit status 1; ``check`` exits 1 when the
schema is incompatible.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from strom.console import schemas as registry
from strom.console.errors import ConsoleError
from strom.console.schemas import DEFAULT_REGISTRY, REGISTRY_ENV, RegistryClient

TYPES = ("AVRO", "JSON", "PROTOBUF")
FILE_HELP = "schema file (.avsc, .json, .proto), '-' for standard input"
TYPE_HELP = "schema type: AVRO, JSON or PROTOBUF (default: PROTOBUF for a .proto file, else AVRO)"


def _client(args: argparse.Namespace) -> RegistryClient:
    return RegistryClient(args.registry, args.timeout_s)


def schemas_list(args: argparse.Namespace) -> int:
    for subject in registry.list_subjects(_client(args), args.deleted):
        print(subject)
    return 0


def schemas_versions(args: argparse.Namespace) -> int:
    for version in registry.list_versions(_client(args), args.subject, args.deleted):
        print(version)
    return 0


def schemas_get(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.id is not None:
        print(registry.schema_text(registry.get_by_id(client, args.id)))
        return 0
    if args.subject is None:
        raise ConsoleError("strom schemas get: give a SUBJECT (and VERSION) or --id")
    found = registry.get_version(client, args.subject, args.version)
    kind = f" type {found['schemaType']}" if "schemaType" in found else ""
    print(f"subject {found['subject']} version {found['version']} id {found['id']}{kind}")
    print(registry.schema_text(found))
    return 0


def schemas_register(args: argparse.Namespace) -> int:
    schema_type = registry.schema_type_of(args.file, args.type)
    schema = registry.read_schema(args.file, schema_type)
    print(registry.register(_client(args), args.subject, schema, schema_type))
    return 0


def schemas_check(args: argparse.Namespace) -> int:
    schema_type = registry.schema_type_of(args.file, args.type)
    schema = registry.read_schema(args.file, schema_type)
    result = registry.check(_client(args), args.subject, schema, args.version, schema_type)
    if result["is_compatible"]:
        print("compatible")
        return 0
    print("incompatible")
    for message in result.get("messages", []):
        print(f"  {message}")
    return 1


def schemas_config(args: argparse.Namespace) -> int:
    print(registry.config(_client(args), args.subject, args.set, args.delete))
    return 0


def schemas_delete(args: argparse.Namespace) -> int:
    for version in registry.delete(_client(args), args.subject, args.version, args.permanent):
        print(version)
    return 0


def add_schemas_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--registry",
        metavar="URL",
        default=os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY,
        help=f"schema registry URL (default: ${REGISTRY_ENV} or {DEFAULT_REGISTRY})",
    )
    parent.add_argument(
        "--timeout-s", type=float, default=30.0, metavar="S", help="HTTP timeout (default 30)"
    )
    schemas = commands.add_parser("schemas", help="the schema registry: subjects, versions, compatibility")
    actions = schemas.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = actions.add_parser(
            name, help=help_, parents=[parent], allow_abbrev=False
        )
        sub.set_defaults(handler=f"schemas_{name}")
        return sub

    add("list", "list subjects").add_argument("--deleted", action="store_true", help="include soft-deleted")
    versions = add("versions", "list a subject's versions")
    versions.add_argument("subject", metavar="SUBJECT")
    versions.add_argument("--deleted", action="store_true", help="include soft-deleted versions")
    get = add("get", "show a subject's version (default: latest) or a schema by --id")
    get.add_argument("subject", metavar="SUBJECT", nargs="?")
    get.add_argument("version", metavar="VERSION", nargs="?", default="latest")
    get.add_argument("--id", type=int, metavar="ID", help="the schema with this id")
    register = add("register", "register a schema file under a subject; prints its id")
    register.add_argument("subject", metavar="SUBJECT")
    register.add_argument("file", metavar="FILE", help=FILE_HELP)
    register.add_argument("--type", type=str.upper, choices=TYPES, help=TYPE_HELP)
    check = add("check", "test a schema file against a subject (latest, or --version, or --all)")
    check.add_argument("subject", metavar="SUBJECT")
    check.add_argument(
        "file", metavar="FILE", help="schema file (.avsc, .json, .proto), '-' for standard input"
    )
    check.add_argument("--type", type=str.upper, choices=TYPES, help=TYPE_HELP)
    which = check.add_mutually_exclusive_group()
    which.add_argument("--version", default="latest", help="version to test against (default latest)")
    which.add_argument("--all", dest="version", action="store_const", const=None, help="every version")
    config = add("config", "show or set the compatibility level (global, or a subject's)")
    config.add_argument("subject", metavar="SUBJECT", nargs="?")
    config.add_argument("--set", metavar="LEVEL", help="BACKWARD, FORWARD, FULL, *_TRANSITIVE or NONE")
    config.add_argument("--delete", action="store_true", help="remove the setting (back to the default)")
    delete = add("delete", "delete a subject or one version (soft; --permanent after a soft delete)")
    delete.add_argument("subject", metavar="SUBJECT")
    delete.add_argument("--version", metavar="VERSION", help="only this version ('latest' allowed)")
    delete.add_argument("--permanent", action="store_true", help="hard delete (after a soft delete)")


SCHEMAS_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "schemas_list": schemas_list,
    "schemas_versions": schemas_versions,
    "schemas_get": schemas_get,
    "schemas_register": schemas_register,
    "schemas_check": schemas_check,
    "schemas_config": schemas_config,
    "schemas_delete": schemas_delete,
}
