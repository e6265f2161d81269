"""Running the ``strom`` command line against a broker from tests, as a user would."""

from __future__ import annotations

import subprocess
import sys

STROM = [sys.executable, "-m", "strom.cli.main"]


def describe_group(bootstrap: str, group: str) -> list[str]:
    """The lines ``strom groups describe <group>`` prints (it must succeed)."""
    result = subprocess.run(
        [*STROM, "--bootstrap-server", bootstrap, "groups", "describe", group],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return result.stdout.decode().splitlines()
