"""The code blocks of a docs page, and running one as a user would: the tests that keep the docs'
walk-throughs true read the blocks from the page itself, so an edit of the page is what they run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def block(page: Path, kind: str, after: str) -> str:
    """The first ```kind block of ``page`` after the text ``after``."""
    text = page.read_text()
    match = re.compile(rf"```{kind}\n(.*?)```", re.S).search(text, text.index(after))
    assert match is not None, f"no {kind} block after {after!r} in {page.name}"
    return match.group(1)


def user_env(**extra: str) -> dict[str, str]:
    """The environment for a script run in another directory: a relative PYTHONPATH (src) made absolute,
    so that the script imports this checkout's strom."""
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) for p in paths if p), **extra}


# `strom` and `python` as a user's shell has them: this checkout's, with the interpreter running the tests.
SHELL_PRELUDE = (
    f'python() {{ "{sys.executable}" "$@"; }}\nstrom() {{ "{sys.executable}" -m strom.cli.main "$@"; }}\n'
)


def run_script(args: list[str], script: str, cwd: Path, env: dict[str, str], timeout_s: float = 120) -> str:
    """Run ``script`` on the standard input of ``args`` (``python -`` or ``bash -e``); its output."""
    done = subprocess.run(
        args, input=script, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
