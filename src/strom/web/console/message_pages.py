"""The message browser's form and results (pure: the query and the scan in, HTML out), and the query's
reading from a page's URL parameters.

Parameters: ``mode`` (``newest``, ``offset``, ``timestamp``, ``key``), ``n`` (records to show),
``offset``, ``timestamp`` (milliseconds since the epoch, or ISO 8601 such as ``2026-11-27T10:00:00``,
UTC unless it names a zone), ``key`` (text, or ``0x``-prefixed hex), ``before`` (the cursor of a
backward scan's "continue").
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from urllib.parse import urlencode

from strom.web.console.decode import RecordDecoder, Shown
from strom.web.console.pages import esc, table
from strom.web.console.scan import MAX_RECORDS, MODES, Query, Scan

_MODE_NAMES = {
    "newest": "Newest first",
    "offset": "From offset",
    "timestamp": "From time",
    "key": "By key (newest first)",
}


class BadQuery(ValueError):
    pass


def parse_time_ms(text: str) -> int:
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadQuery(f"timestamp {text!r} is neither milliseconds nor ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def parse_key(text: str) -> bytes:
    if text.startswith("0x"):
        try:
            return bytes.fromhex(text[2:])
        except ValueError:
            raise BadQuery(f"key {text!r} starts with 0x but is not hex") from None
    return text.encode("utf-8")


def _int(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadQuery(f"{name} {raw!r} is not a whole number") from None


def parse_query(params: Mapping[str, str]) -> Query:
    """The browser's query from URL parameters.

    Raises:
        BadQuery: a parameter that cannot be read (said on the page, with the form kept).
    """
    mode = params.get("mode", "newest")
    if mode not in MODES:
        raise BadQuery(f"mode {mode!r} is not one of {', '.join(MODES)}")
    before = params.get("before", "").strip()
    query = Query(
        mode=mode,
        limit=max(1, min(_int(params, "n", 20), MAX_RECORDS)),
        offset=_int(params, "offset", 0),
        before=_int(params, "before", 0) if before else None,
    )
    if mode == "timestamp":
        if not params.get("timestamp", "").strip():
            raise BadQuery("from time needs a timestamp")
        query = Query(query.mode, query.limit, timestamp_ms=parse_time_ms(params["timestamp"]))
    if mode == "key":
        if "key" not in params:
            raise BadQuery("by key needs a key")
        query = Query(query.mode, query.limit, key=parse_key(params["key"]), before=query.before)
    return query


def query_params(query: Query) -> dict[str, str]:
    params = {"mode": query.mode, "n": str(query.limit)}
    if query.mode == "offset":
        params["offset"] = str(query.offset)
    if query.mode == "timestamp":
        params["timestamp"] = str(query.timestamp_ms)
    if query.mode == "key":
        key = query.key
        try:
            params["key"] = key.decode("utf-8") if not key.startswith(b"0x") else "0x" + key.hex()
        except UnicodeDecodeError:
            params["key"] = "0x" + key.hex()
    if query.before is not None:
        params["before"] = str(query.before)
    return params


def form(query: Query, raw: Mapping[str, str]) -> str:
    options = "".join(
        f"<option value='{m}'{' selected' if m == query.mode else ''}>{esc(name)}</option>"
        for m, name in _MODE_NAMES.items()
    )

    def field(name: str, size: int, hint: str) -> str:
        return (
            f"<label>{esc(name)} <input name='{name}' value='{esc(raw.get(name, ''))}' size='{size}' "
            f"placeholder='{esc(hint)}'></label> "
        )

    return (
        "<form method='get' id='browse'><select name='mode'>" + options + "</select> "
        + field("offset", 8, "0")
        + field("timestamp", 20, "2026-11-27T10:00:00 or ms")
        + field("key", 16, "text or 0xhex")
        + f"<label>show <input name='n' value='{query.limit}' size='4'></label> "
        + "<button>Browse</button></form>"
    )  # fmt: skip


def _cell(shown: Shown) -> str:
    badge = ""
    if shown.schema_id is not None:
        badge = f"<span class='muted'>{esc(shown.form)} · schema {shown.schema_id}</span><br>"
    elif shown.form in ("hex", "null"):
        badge = f"<span class='muted'>{esc(shown.form)}</span><br>"
    return f"{badge}<pre>{esc(shown.text)}</pre>"


def format_time(ms: int) -> str:
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def results(scan: Scan, decoder: RecordDecoder, path: str) -> str:
    rows = []
    for r in scan.records:
        headers = ", ".join(
            f"{k}={'null' if v is None else v.decode('utf-8', 'replace')}" for k, v in r.headers
        )
        rows.append(
            [esc(r.offset), f"{esc(format_time(r.timestamp))}<br><span class='muted'>{r.timestamp}</span>",
             _cell(decoder.show(r.key)), _cell(decoder.show(r.value)), esc(headers)]
        )  # fmt: skip
    shown = table(["Offset", "Timestamp", "Key", "Value", "Headers"], rows, "messages")
    summary = (
        f"Scanned {scan.scanned:,} records ({scan.scanned_bytes:,} bytes of batches), offsets "
        f"{scan.low:,} to {max(scan.high - 1, scan.low):,} (log start {scan.log_start:,}, high watermark "
        f"{scan.high_watermark:,}); {len(scan.records)} shown."
    )
    more = ""
    if scan.next is not None:
        more = (
            f" <a id='continue' href='{esc(path + '?' + urlencode(query_params(scan.next)))}'>Continue →</a>"
        )
    else:
        more = " <span class='muted'>Nothing further in this direction.</span>"
    return f"<p id='scan-summary'>{esc(summary)}{more}</p>" + shown
