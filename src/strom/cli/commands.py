"""Command handlers: turn a parsed ``argparse.Namespace`` into one console-tool call.

Each handler returns the process exit status. User-facing failures are raised as
:class:`~strom.console.errors.ConsoleError` by the console layer and printed by ``strom.cli.main``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from strom.console.clients import ClientOptions, parse_key_values
from strom.console.consume import ConsumeSettings, StartFrom, consume
from strom.console.errors import ConsoleError
from strom.console.groups import (
    ResetRequest,
    ResetTarget,
    delete_groups,
    describe_group,
    list_groups,
    reset_offsets,
)
from strom.console.produce import ProduceSettings, produce_lines
from strom.console.reassign import cancel_reassignment, execute_reassignment, verify_reassignment
from strom.console.reassignment_plan import parse_plan
from strom.console.share_groups import delete_share_offsets
from strom.console.topics import (
    add_partitions,
    alter_topic_config,
    create_topics,
    delete_topics,
    describe_topics,
    list_topics,
)
from strom.console.transactions import (
    ListRequest,
    abort_transaction,
    describe_producers,
    describe_transaction,
    list_transactions,
)

Handler = Callable[[argparse.Namespace], int]


def client_options(args: argparse.Namespace) -> ClientOptions:
    """The global connection options, merging --command-config given before and after the command."""
    items = [*args.command_config, *getattr(args, "command_config_after", [])]
    return ClientOptions(
        bootstrap_servers=args.bootstrap_server,
        command_config=parse_key_values(items, "--command-config"),
        timeout_s=args.request_timeout_s,
    )


def serve(args: argparse.Namespace) -> int:
    """``strom serve``: hand over to the broker, which owns config parsing and validation."""
    try:
        # Imported here so that every client-side command works without the broker package.
        from strom.node.main import serve as run_broker
    except ModuleNotFoundError as exc:
        if exc.name not in {
            "strom.broker",
            "strom.broker.main",
            "strom.web",
            "strom.node",
            "strom.node.main",
        }:
            raise
        raise ConsoleError(
            "the broker is not available in this installation (strom.node.main missing)"
        ) from None
    return run_broker(args.config, list(args.overrides))


def topics_create(args: argparse.Namespace) -> int:
    configs = parse_key_values(args.config, "--config")
    names = [*args.names, *(_names_from(args.from_file) if args.from_file else [])]
    if not names:
        raise ConsoleError(f"no topic names in {args.from_file}")
    create_topics(
        client_options(args),
        names,
        sys.stdout,
        sys.stderr,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        configs=configs,
        batch_size=args.batch_size,
    )
    return 0


def _names_from(path: str) -> list[str]:
    """One topic name per line of ``path`` (``-``: stdin), blank lines and ``#`` comments skipped."""
    lines = _read_text(path).splitlines()
    return [name for name in (line.strip() for line in lines) if name and not name.startswith("#")]


def topics_list(args: argparse.Namespace) -> int:
    list_topics(client_options(args), sys.stdout)
    return 0


def topics_describe(args: argparse.Namespace) -> int:
    describe_topics(client_options(args), args.names, sys.stdout)
    return 0


def topics_delete(args: argparse.Namespace) -> int:
    delete_topics(client_options(args), args.names, sys.stdout)
    return 0


def topics_alter_config(args: argparse.Namespace) -> int:
    alter_topic_config(
        client_options(args),
        args.name,
        sys.stdout,
        set_configs=parse_key_values(args.set_, "--set"),
        delete_configs=args.delete,
    )
    return 0


def topics_add_partitions(args: argparse.Namespace) -> int:
    add_partitions(client_options(args), args.name, args.total, sys.stdout)
    return 0


def topics_reassign(args: argparse.Namespace) -> int:
    if (args.wait or args.wait_timeout_s is not None) and not args.execute:
        raise ConsoleError("--wait and --wait-timeout-s apply to --execute only")
    path = args.reassignment_json_file
    moves = parse_plan(_read_text(path), "stdin" if path == "-" else path)
    if args.execute:
        execute_reassignment(
            client_options(args),
            moves,
            sys.stdout,
            sys.stderr,
            wait=args.wait or args.wait_timeout_s is not None,
            wait_timeout_s=args.wait_timeout_s,
        )
    elif args.verify:
        verify_reassignment(client_options(args), moves, sys.stdout)
    else:
        cancel_reassignment(client_options(args), moves, sys.stdout, sys.stderr)
    return 0


def _read_text(path: str) -> str:
    """The whole of ``path`` (``-``: stdin) as UTF-8 text."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConsoleError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def produce(args: argparse.Namespace) -> int:
    headers = [(key, os.fsencode(value)) for key, value in (h.split("=", 1) for h in args.header)]
    if args.key_separator == "":
        raise ConsoleError("--key-separator must not be empty")
    settings = ProduceSettings(
        topic=args.topic,
        # fsencode returns the exact bytes the shell passed, even when they are not valid UTF-8.
        key_separator=None if args.key_separator is None else os.fsencode(args.key_separator),
        headers=headers,
        partition=args.partition,
        acks=args.acks,
        compression=args.compression,
        properties=parse_key_values(args.property, "--property"),
        keep_empty_lines=args.keep_empty_lines,
    )
    produce_lines(client_options(args), settings, sys.stdin.buffer)
    return 0


def consume_command(args: argparse.Namespace) -> int:
    start, start_value = StartFrom.LATEST, None
    if args.from_beginning:
        start = StartFrom.BEGINNING
    elif args.offset is not None:
        start, start_value = StartFrom.OFFSET, args.offset
    elif args.timestamp is not None:
        start, start_value = StartFrom.TIMESTAMP, args.timestamp
    settings = ConsumeSettings(
        topic=args.topic,
        start=start,
        start_value=start_value,
        partition=args.partition,
        max_messages=args.max_messages,
        idle_timeout_s=args.timeout_s,
        exit_at_end=args.exit_at_end,
        group=args.group,
        print_key=args.print_key,
        print_headers=args.print_headers,
        print_offset=args.print_offset,
        print_timestamp=args.print_timestamp,
        # --rack is librdkafka's client.rack (KIP-392: fetch from a replica in that rack); an explicit
        # --property client.rack=... wins, like every --property.
        properties={
            **({"client.rack": args.rack} if args.rack else {}),
            **parse_key_values(args.property, "--property"),
        },
    )
    consume(client_options(args), settings, sys.stdout.buffer)
    return 0


def groups_list(args: argparse.Namespace) -> int:
    list_groups(client_options(args), sys.stdout, with_state=args.state, with_type=args.type)
    return 0


def groups_describe(args: argparse.Namespace) -> int:
    describe_group(client_options(args), args.group, sys.stdout)
    return 0


def groups_reset_offsets(args: argparse.Namespace) -> int:
    target, value = ResetTarget.EARLIEST, None
    if args.to_latest:
        target = ResetTarget.LATEST
    elif args.to_datetime is not None:
        target, value = ResetTarget.DATETIME, args.to_datetime
    elif args.to_offset is not None:
        target, value = ResetTarget.OFFSET, args.to_offset
    request = ResetRequest(
        group=args.group,
        topic=args.topic,
        target=target,
        value=value,
        partitions=args.partition,
        execute=args.execute,
    )
    reset_offsets(client_options(args), request, sys.stdout)
    return 0


def groups_delete_offsets(args: argparse.Namespace) -> int:
    delete_share_offsets(client_options(args), args.group, args.topic, sys.stdout)
    return 0


def groups_delete(args: argparse.Namespace) -> int:
    delete_groups(client_options(args), args.groups, sys.stdout)
    return 0


def transactions_list(args: argparse.Namespace) -> int:
    request = ListRequest(states=args.state, producer_ids=args.producer_id, hanging=args.hanging)
    list_transactions(client_options(args), request, sys.stdout)
    return 0


def transactions_describe(args: argparse.Namespace) -> int:
    describe_transaction(client_options(args), args.transactional_id, sys.stdout)
    return 0


def transactions_abort(args: argparse.Namespace) -> int:
    abort_transaction(client_options(args), args.topic, args.partition, args.start_offset, sys.stdout)
    return 0


def transactions_producers(args: argparse.Namespace) -> int:
    describe_producers(client_options(args), args.topic, args.partition, sys.stdout)
    return 0


HANDLERS: dict[str, Handler] = {
    "serve": serve,
    "topics_create": topics_create,
    "topics_list": topics_list,
    "topics_describe": topics_describe,
    "topics_delete": topics_delete,
    "topics_alter_config": topics_alter_config,
    "topics_add_partitions": topics_add_partitions,
    "topics_reassign": topics_reassign,
    "produce": produce,
    "consume": consume_command,
    "groups_list": groups_list,
    "groups_describe": groups_describe,
    "groups_reset_offsets": groups_reset_offsets,
    "groups_delete": groups_delete,
    "groups_delete_offsets": groups_delete_offsets,
    "transactions_list": transactions_list,
    "transactions_describe": transactions_describe,
    "transactions_producers": transactions_producers,
    "transactions_abort": transactions_abort,
}
