"""The process-halt port: how the broker stops at once when it cannot go on (Kafka's ``Exit.halt``).

Theory of operation. A broker halts when the disk failed in a way it must not go on from: a sync
refused in its last online log dir (`strom.storage.log_dirs`). A halt runs none of the shutdown: no
log is closed, no checkpoint or clean-shutdown marker is written, so the next start recovers every log
from its recovery point, as after a crash. `halt` is the port, a module-level function that library
code calls as ``halt.halt(code)`` (never imported by name, so that `use` can replace it): by default it
flushes the log handlers (the fatal line must reach the log) and ends the process with ``os._exit``.
The deterministic simulation runs every broker in one process, so it points the port (`use`) at its
own halt, which turns the calling broker's halt into a crash of that machine's process and raises
`Halted` to stop the code that called it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

__all__ = ["Halted", "halt", "use"]


class Halted(BaseException):
    """Raised by a halt that cannot end the process (the simulation's): the caller's code stops here.

    A ``BaseException``, so that the ``except Exception`` of the code it unwinds does not swallow it."""


def _exit(code: int) -> NoReturn:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(code)


halt: Callable[[int], NoReturn] = _exit


@contextmanager
def use(replacement: Callable[[int], NoReturn]) -> Iterator[None]:
    """Route `halt` to ``replacement`` until the block ends."""
    global halt
    previous = halt
    halt = replacement
    try:
        yield
    finally:
        halt = previous
