"""Running the ``strom`` command line against a broker from tests, as a user would."""

from __future__ import annotations

import subprocess
import sys

STROM = [sys.executable, "-m", "strom.cli.main"]


def _run(bootstrap: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*STROM, "--bootstrap-server", bootstrap, *args], capture_output=True, timeout=120, check=False
    )


def _lines(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    """What a command that must have succeeded printed (its error output is the failure's text)."""
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def strom(bootstrap: str, *args: str) -> list[str]:
    """The lines a ``strom`` command prints (it must succeed; its error output is the failure's text)."""
    return _lines(_run(bootstrap, *args))


def describe_group_once_it_exists(bootstrap: str, group: str) -> list[str] | None:
    """The lines ``strom groups describe <group>`` prints, or None while no coordinator knows the group
    (a share group exists only once its first member has sent a heartbeat)."""
    result = _run(bootstrap, "groups", "describe", group)
    if result.returncode != 0 and result.stderr.decode() == f"strom: error: group '{group}' does not exist\n":
        return None
    return _lines(result)


def describe_group(bootstrap: str, group: str) -> list[str]:
    """The lines ``strom groups describe <group>`` prints (it must succeed)."""
    return strom(bootstrap, "groups", "describe", group)
