"""The ``strom`` command line: argparse definitions only (no I/O, no clients).

Every usage error is reported as a single line, ``strom <command>: error: <what> (see ... --help)``,
with exit status 2, instead of argparse's multi-line usage dump. Global connection options may be
given before the command (``strom --bootstrap-server h:p topics list``) or after it
(``strom topics list --bootstrap-server h:p``), as users of Kafka's tools are used to.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import NoReturn

from strom.console.errors import ConsoleError
from strom.console.timestamps import parse_timestamp_ms
from strom.console.topics import DEFAULT_CREATE_BATCH

DEFAULT_BOOTSTRAP = "localhost:9092"
BOOTSTRAP_ENV = "STROM_BOOTSTRAP"
DEFAULT_REQUEST_TIMEOUT_S = 30.0


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit status 2).

    ``require_any`` names destinations of which at least one must be given (argparse has no such
    group for a positional and an option), with the text shown when none is.
    """

    require_any: tuple[tuple[str, ...], str] | None = None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if self.require_any is not None:
            dests, text = self.require_any
            if not any(getattr(parsed, dest, None) for dest in dests):
                self.error(f"the following arguments are required: {text}")
        return parsed, extras

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # Reported by the command's own parser, so the message points at the --help that lists
            # the command's options (argparse would blame the top-level parser).
            self._command_parser(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _command_parser(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost subcommand parser that `parsed` went through."""
        parser: argparse.ArgumentParser = self
        while True:
            chosen = None
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    chosen = action.choices.get(str(getattr(parsed, action.dest, "")))
            if chosen is None:
                return parser
            parser = chosen

    def error(self, message: str) -> NoReturn:
        flat = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {flat} (see '{self.prog} --help')\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def key_value(text: str) -> str:
    """argparse type: a ``key=value`` string (kept as text; split later)."""
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return text


def timestamp_ms(text: str) -> int:
    """argparse type: epoch milliseconds or an ISO 8601 date-time."""
    try:
        return parse_timestamp_ms(text)
    except ConsoleError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def build_parser() -> OneLineErrorParser:
    """The complete ``strom`` parser; each leaf command sets ``handler`` (see ``strom.cli.commands``)."""
    parser = OneLineErrorParser(
        prog="strom", description="Strom: a Kafka-compatible streaming platform.", allow_abbrev=False
    )
    _add_connection_options(parser, top_level=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve(commands)
    _add_topics(commands, _connection_parent())
    _add_produce(commands, _connection_parent())
    _add_consume(commands, _connection_parent())
    _add_groups(commands, _connection_parent())
    _add_transactions(commands, _connection_parent())
    from strom.cli.cluster import add_cluster_commands

    add_cluster_commands(commands, _connection_parent())
    from strom.cli.acls import add_acls_commands

    add_acls_commands(commands, _connection_parent())
    from strom.cli.users import add_users_commands

    add_users_commands(commands, _connection_parent())
    from strom.cli.configs import add_configs_commands

    add_configs_commands(commands, _connection_parent())
    from strom.cli.quotas import add_quotas_commands

    add_quotas_commands(commands, _connection_parent())
    from strom.cli.schemas import add_schemas_commands

    add_schemas_commands(commands)
    from strom.cli.s3_server import add_s3_server_command

    add_s3_server_command(commands)
    return parser


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _add_connection_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    # After the command, defaults are SUPPRESSed so that an option given before the command is not
    # overwritten by the sub-parser's default; --command-config lands in a separate list and is merged.
    default_bootstrap = os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        default=default_bootstrap if top_level else argparse.SUPPRESS,
        help=f"broker(s) to connect to (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--command-config",
        metavar="KEY=VALUE",
        type=key_value,
        action="append",
        dest="command_config" if top_level else "command_config_after",
        default=[] if top_level else argparse.SUPPRESS,
        help="librdkafka property for every client this command creates (repeatable)",
    )
    parser.add_argument(
        "--request-timeout-s",
        metavar="S",
        type=positive_float,
        default=DEFAULT_REQUEST_TIMEOUT_S if top_level else argparse.SUPPRESS,
        help=f"limit for each broker request or delivery (default: {DEFAULT_REQUEST_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=False if top_level else argparse.SUPPRESS,
        help="show librdkafka's log lines on stderr",
    )


def _connection_parent() -> OneLineErrorParser:
    parent = OneLineErrorParser(add_help=False)
    _add_connection_options(parent, top_level=False)
    return parent


def _add_serve(commands: argparse._SubParsersAction[OneLineErrorParser]) -> None:
    serve = commands.add_parser("serve", help="run a broker in the foreground", allow_abbrev=False)
    serve.add_argument(
        "--config", metavar="FILE", help="broker properties file (Kafka server.properties syntax)"
    )
    serve.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="overrides",
        help="override one broker config, e.g. --set log.dirs=./data (repeatable)",
    )
    serve.set_defaults(handler="serve")


def _add_topics(commands: argparse._SubParsersAction[OneLineErrorParser], parent: OneLineErrorParser) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter, grow and delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser(
        "create", help="create topics (many: batched, with progress)", parents=[parent], allow_abbrev=False
    )
    create.add_argument("names", metavar="NAME", nargs="*", help="topic(s) to create")
    create.add_argument(
        "--from-file",
        metavar="FILE",
        help="also create the names in FILE, one per line ('-': stdin; blank lines and # comments skipped)",
    )
    create.add_argument(
        "--batch-size",
        metavar="N",
        type=positive_int,
        default=DEFAULT_CREATE_BATCH,
        help=f"topics per CreateTopics request (default {DEFAULT_CREATE_BATCH})",
    )
    create.require_any = (("names", "from_file"), "NAME (or --from-file FILE)")
    create.add_argument(
        "--partitions", metavar="N", type=positive_int, help="default: the broker's num.partitions"
    )
    create.add_argument(
        "--replication-factor", type=positive_int, help="default: the broker's default.replication.factor"
    )
    create.add_argument("--config", metavar="KEY=VALUE", type=key_value, action="append", default=[])
    create.set_defaults(handler="topics_create")

    actions.add_parser("list", help="list topic names", parents=[parent], allow_abbrev=False).set_defaults(
        handler="topics_list"
    )

    describe = actions.add_parser(
        "describe",
        help="partitions, leaders, replicas, ISR and configs",
        parents=[parent],
        allow_abbrev=False,
    )
    describe.add_argument("names", metavar="NAME", nargs="*", help="default: every topic")
    describe.set_defaults(handler="topics_describe")

    delete = actions.add_parser("delete", help="delete topics", parents=[parent], allow_abbrev=False)
    delete.add_argument("names", metavar="NAME", nargs="+")
    delete.set_defaults(handler="topics_delete")

    alter = actions.add_parser(
        "alter-config", help="set or delete topic config overrides", parents=[parent], allow_abbrev=False
    )
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--set", metavar="KEY=VALUE", type=key_value, action="append", default=[], dest="set_")
    alter.add_argument(
        "--delete", metavar="KEY", action="append", default=[], help="revert KEY to its default"
    )
    alter.set_defaults(handler="topics_alter_config")

    reassign = actions.add_parser(
        "reassign",
        help="move partitions' replicas to other brokers (kafka-reassign-partitions.sh's JSON plan)",
        parents=[parent],
        allow_abbrev=False,
    )
    reassign.add_argument(
        "--reassignment-json-file",
        metavar="FILE",
        required=True,
        help='{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[B,...]},...]} (\'-\': stdin)',
    )
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--execute", action="store_true", help="start the moves (prints the plan to roll back)")
    mode.add_argument("--verify", action="store_true", help="completed or in progress, per partition")
    mode.add_argument("--cancel", action="store_true", help="stop the moves still in progress")
    reassign.add_argument(
        "--wait",
        action="store_true",
        help="with --execute: return when every move is complete (progress bar)",
    )
    reassign.add_argument(
        "--wait-timeout-s", metavar="S", type=positive_float, help="with --wait: give up after S seconds"
    )
    reassign.set_defaults(handler="topics_reassign")

    grow = actions.add_parser(
        "add-partitions", help="increase a topic's partition count", parents=[parent], allow_abbrev=False
    )
    grow.add_argument("name", metavar="NAME")
    grow.add_argument(
        "--total", metavar="N", type=positive_int, required=True, help="the new total partition count"
    )
    grow.set_defaults(handler="topics_add_partitions")


def _add_produce(
    commands: argparse._SubParsersAction[OneLineErrorParser], parent: OneLineErrorParser
) -> None:
    produce = commands.add_parser(
        "produce", help="send stdin lines to a topic", parents=[parent], allow_abbrev=False
    )
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("--key-separator", metavar="SEP", help="each line is KEY SEP VALUE")
    produce.add_argument(
        "--header", metavar="KEY=VALUE", type=key_value, action="append", default=[], help="repeatable"
    )
    produce.add_argument(
        "--partition", metavar="N", type=non_negative_int, help="default: by key (murmur2, as Java)"
    )
    produce.add_argument("--acks", choices=["0", "1", "all", "-1"])
    produce.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    produce.add_argument(
        "--property",
        metavar="KEY=VALUE",
        type=key_value,
        action="append",
        default=[],
        help="librdkafka producer property",
    )
    produce.add_argument(
        "--keep-empty-lines", action="store_true", help="send empty lines as empty records (default: skip)"
    )
    produce.set_defaults(handler="produce")


def _add_consume(
    commands: argparse._SubParsersAction[OneLineErrorParser], parent: OneLineErrorParser
) -> None:
    consume = commands.add_parser(
        "consume", help="print a topic's records to stdout", parents=[parent], allow_abbrev=False
    )
    consume.add_argument("topic", metavar="TOPIC")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    start.add_argument(
        "--offset", metavar="N", type=non_negative_int, help="start at this offset in each partition read"
    )
    start.add_argument(
        "--timestamp",
        metavar="MS|ISO",
        type=timestamp_ms,
        help="start at the first record at/after this time",
    )
    consume.add_argument("--partition", metavar="N", type=non_negative_int, help="read only this partition")
    consume.add_argument("--max-messages", metavar="N", type=positive_int)
    consume.add_argument(
        "--timeout-s", metavar="S", type=positive_float, help="exit after S seconds without a record"
    )
    consume.add_argument(
        "--exit-at-end", action="store_true", help="exit once every partition is read to its end"
    )
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-headers", action="store_true")
    consume.add_argument("--print-offset", action="store_true", help="print Partition:P<TAB>Offset:O")
    consume.add_argument("--print-timestamp", action="store_true")
    consume.add_argument("--group", metavar="G", help="consume as member of group G (subscribe, commit)")
    consume.add_argument(
        "--rack",
        metavar="R",
        help="client.rack: fetch from an in-sync replica in rack R when the broker allows it (KIP-392)",
    )
    consume.add_argument(
        "--property",
        metavar="KEY=VALUE",
        type=key_value,
        action="append",
        default=[],
        help="librdkafka consumer property",
    )
    consume.set_defaults(handler="consume")


def _add_groups(commands: argparse._SubParsersAction[OneLineErrorParser], parent: OneLineErrorParser) -> None:
    groups = commands.add_parser(
        "groups", help="list, describe, reset and delete consumer groups and share groups"
    )
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="list group ids", parents=[parent], allow_abbrev=False)
    listing.add_argument("--state", action="store_true", help="also print each group's state")
    listing.add_argument(
        "--type", action="store_true", help="also print each group's type (classic, consumer, share)"
    )
    listing.set_defaults(handler="groups_list")

    describe = actions.add_parser(
        "describe", help="members, committed offsets and lag", parents=[parent], allow_abbrev=False
    )
    describe.add_argument("group", metavar="GROUP")
    describe.set_defaults(handler="groups_describe")

    reset = actions.add_parser(
        "reset-offsets", help="move a group's committed offsets", parents=[parent], allow_abbrev=False
    )
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", required=True)
    reset.add_argument(
        "--partition", metavar="N", type=non_negative_int, action="append", default=[], help="default: all"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-datetime", metavar="ISO|MS", type=timestamp_ms)
    target.add_argument("--to-offset", metavar="N", type=non_negative_int)
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: dry run)")
    reset.set_defaults(handler="groups_reset_offsets")

    forget = actions.add_parser(
        "delete-offsets",
        help="delete a share group's offsets on topics (it starts them over)",
        parents=[parent],
        allow_abbrev=False,
    )
    forget.add_argument("group", metavar="GROUP")
    forget.add_argument("--topic", metavar="T", action="append", required=True, help="repeatable")
    forget.set_defaults(handler="groups_delete_offsets")

    delete = actions.add_parser("delete", help="delete groups", parents=[parent], allow_abbrev=False)
    delete.add_argument("groups", metavar="GROUP", nargs="+")
    delete.set_defaults(handler="groups_delete")


def _add_transactions(
    commands: argparse._SubParsersAction[OneLineErrorParser], parent: OneLineErrorParser
) -> None:
    txns = commands.add_parser("transactions", help="list, describe and abort transactions; producer state")
    actions = txns.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser(
        "list", help="transactional ids of every coordinator", parents=[parent], allow_abbrev=False
    )
    listing.add_argument(
        "--state",
        metavar="STATE",
        action="append",
        default=[],
        help="Kafka's state name, e.g. Ongoing (repeatable)",
    )
    listing.add_argument("--producer-id", metavar="ID", type=non_negative_int, action="append", default=[])
    listing.add_argument(
        "--hanging",
        action="store_true",
        help="only transactions open longer than the coordinator's transaction.max.timeout.ms, described",
    )
    listing.set_defaults(handler="transactions_list")

    describe = actions.add_parser(
        "describe", help="one transactional id, from its coordinator", parents=[parent], allow_abbrev=False
    )
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL-ID")
    describe.set_defaults(handler="transactions_describe")

    producers = actions.add_parser(
        "producers",
        help="producer state of a topic's partitions, from their leaders",
        parents=[parent],
        allow_abbrev=False,
    )
    producers.add_argument("topic", metavar="TOPIC")
    producers.add_argument(
        "--partition", metavar="N", type=non_negative_int, action="append", default=[], help="default: all"
    )
    producers.set_defaults(handler="transactions_producers")

    abort = actions.add_parser(
        "abort",
        help="end a hanging transaction on one partition with an ABORT marker",
        parents=[parent],
        allow_abbrev=False,
    )
    abort.add_argument("topic", metavar="TOPIC")
    abort.add_argument("--partition", metavar="N", type=non_negative_int, required=True)
    abort.add_argument(
        "--start-offset",
        metavar="OFFSET",
        type=non_negative_int,
        required=True,
        help="first offset of the transaction (TXN-START-OFFSET in 'strom transactions producers')",
    )
    abort.set_defaults(handler="transactions_abort")
