"""The ``strom`` entry point: parse arguments, run one command, map failures to exit statuses.

Exit statuses: 0 success; 1 a failure reported by a command (one line on stderr, ``strom: error: ...``);
2 a usage error (one line, from the parser); 130 interrupted by Ctrl-C; 141 stdout closed early (as
``strom consume ... | head`` does), matching what a shell reports for SIGPIPE.

Tracebacks are reserved for bugs: anything other than ``ConsoleError``, ``KeyboardInterrupt`` and a
broken stdout pipe propagates unchanged.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

from strom.cli.commands import HANDLERS
from strom.cli.parser import build_parser
from strom.console.clients import LIBRDKAFKA_LOGGER
from strom.console.errors import ConsoleError

EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``strom`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    args = build_parser().parse_args(argv)
    _configure_logging(verbose=getattr(args, "verbose", False))
    # Ctrl-C (SIGINT) is how an open-ended consume is stopped. A process started in the background by a
    # non-interactive shell inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt
    # handler; install it explicitly so SIGINT always means "stop cleanly" for this tool.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from strom.cli.acls import ACLS_HANDLERS
        from strom.cli.cluster import CLUSTER_HANDLERS
        from strom.cli.configs import CONFIGS_HANDLERS
        from strom.cli.quotas import QUOTAS_HANDLERS
        from strom.cli.s3_server import S3_SERVER_HANDLERS
        from strom.cli.schemas import SCHEMAS_HANDLERS
        from strom.cli.users import USERS_HANDLERS

        handlers = {**HANDLERS, **CLUSTER_HANDLERS, **SCHEMAS_HANDLERS, **ACLS_HANDLERS, **USERS_HANDLERS}
        handlers.update(S3_SERVER_HANDLERS)
        handlers.update(QUOTAS_HANDLERS)
        handlers.update(CONFIGS_HANDLERS)
        return handlers[args.handler](args)
    except ConsoleError as exc:
        print(f"strom: error: {exc.message}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away; point stdout at /dev/null so the interpreter's final flush does not
        # raise again and print a second error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _configure_logging(*, verbose: bool) -> None:
    # Without a handler of its own, Python's last-resort handler would print librdkafka's ERROR lines
    # (connection refused, retries ...) in the middle of a command's one-line error contract.
    LIBRDKAFKA_LOGGER.propagate = False
    if verbose:
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s librdkafka %(levelname)s %(message)s"))
        LIBRDKAFKA_LOGGER.setLevel(logging.DEBUG)
    else:
        handler = logging.NullHandler()
    LIBRDKAFKA_LOGGER.addHandler(handler)


if __name__ == "__main__":
    sys.exit(main())
