"""Progress of long CLI operations on the terminal (rich), silent when not on one.

A `Progress` draws on standard error, and only when standard error is a terminal (``isatty``), so
records written to standard output and anything piped or captured stay exactly as they were: a
script sees no progress bar, no escape codes. ``STROM_PROGRESS=0`` turns it off on a terminal too;
``STROM_PROGRESS=1`` forces it (used by the tests, which attach a pseudo-terminal anyway).

Usage: ``with progress("Producing", total=size, unit="bytes") as bar: bar.advance(n)``; ``total`` None
draws a counter without a bar.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress


def enabled(stream: TextIO | None = None) -> bool:
    forced = os.environ.get("STROM_PROGRESS", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return _isatty(stream or sys.stderr)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    def __init__(self, description: str, total: float | None = None, unit: str = "items") -> None:
        self._rich: RichProgress | None = None
        self._task: TaskID | None = None
        self.done = 0.0
        if not enabled():
            return
        counter: ProgressColumn = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
        columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is None:
            columns += [TextColumn("{task.completed:,.0f} " + unit), TimeElapsedColumn()]
        else:
            columns += [BarColumn(), counter, TimeElapsedColumn(), TimeRemainingColumn()]
        self._rich = RichProgress(*columns, console=Console(stderr=True), transient=False)
        self._task = self._rich.add_task(description, total=total)

    def __enter__(self) -> Progress:
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._rich is not None:
            self._rich.stop()

    def advance(self, amount: float = 1) -> None:
        self.done += amount
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, completed=self.done)

    def echo(self, line: str, out: TextIO) -> None:
        """Print ``line`` to ``out``; through the bar's console when ``out`` is a terminal too.

        A line written straight to the terminal the bar is drawn on would be torn by its next redraw;
        printed through rich it lands above the bar. A file or pipe gets it unchanged.
        """
        if self._rich is not None and _isatty(out):
            self._rich.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=out)

    def describe(self, text: str) -> None:
        if self._rich is not None and self._task is not None:
            self._rich.update(self._task, description=text)


def progress(description: str, total: float | None = None, unit: str = "items") -> Progress:
    return Progress(description, total, unit)
