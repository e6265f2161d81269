"""Parsing of the timestamps users type: epoch milliseconds or ISO 8601.

Kafka timestamps are milliseconds since the Unix epoch. A bare integer is taken as exactly that. Anything
else must be an ISO 8601 date or date-time (``2024-05-01``, ``2024-05-01T12:30:00.250``,
``2024-05-01T12:30:00+02:00``, ``...Z``). A date-time without a UTC offset is read as UTC, not local
time: the same command then means the same instant on every machine and in CI.
"""

from __future__ import annotations

import datetime as dt

from strom.console.errors import ConsoleError


def parse_timestamp_ms(text: str) -> int:
    """Return the Kafka timestamp (ms since the epoch) that ``text`` denotes.

    Raises:
        ConsoleError: ``text`` is neither a non-negative integer nor an ISO 8601 date/date-time.
    """
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = dt.datetime.fromisoformat(stripped)
    except ValueError:
        raise ConsoleError(
            f"invalid timestamp {text!r}: expected milliseconds since the epoch or ISO 8601 "
            "such as 2024-05-01T12:30:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    millis = _exact_ms(moment)
    if millis < 0:
        raise ConsoleError(f"invalid timestamp {text!r}: before 1970-01-01T00:00:00Z")
    return millis


def _exact_ms(moment: dt.datetime) -> int:
    # datetime.timestamp() returns float seconds, which can round a .250 fraction to 249 ms;
    # integer arithmetic on the timedelta is exact.
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
