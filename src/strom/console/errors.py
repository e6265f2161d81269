"""The one exception the console tools raise for problems the user can act on.

Contract: any failure a user can cause or fix (bad input, unknown topic, unreachable broker, an error
code returned by the broker) surfaces as :class:`ConsoleError` with a single-line message. The CLI
prints that line and exits non-zero. Any other exception escaping a console function is a bug in Strom
and is allowed to show its traceback.
"""

from __future__ import annotations


class ConsoleError(Exception):
    """A user-facing failure with a one-line, self-explanatory message."""

    def __init__(self, message: str) -> None:
        # Newlines would break the "one line on stderr" promise, so they are folded here once
        # instead of at every raise site.
        super().__init__(" ".join(message.split("\n")))

    @property
    def message(self) -> str:
        """The single-line message to show the user."""
        return str(self.args[0])
