"""Running the ``strom`` command line against a broker from tests, as a user would."""

from __future__ import annotations

import subprocess
import sys

STROM = [sys.executable, "-m", "strom.cli.main"]


def strom(bootstrap: str, *args: str) -> list[str]:
    """The lines a ``strom`` command prints (it must succeed; its error output is the failure's text)."""
    result = subprocess.run(
        [*STROM, "--bootstrap-server", bootstrap, *args], capture_output=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def describe_group(bootstrap: str, group: str) -> list[str]:
    """The lines ``strom groups describe <group>`` prints (it must succeed)."""
    return strom(bootstrap, "groups", "describe", group)
