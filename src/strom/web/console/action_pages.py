"""The actions' forms, confirmation and result pages (pure; the actions themselves are `actions.py`).

``/ui/actions/<action>`` (GET) is the action's form, prefilled from the URL (``?topic=``, ``?group=``);
posting it to the same path answers the confirmation page, whose *Confirm* posts again with
``confirm=yes``. Every form carries the person's CSRF token as the hidden field ``csrf``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import quote

from strom.web.console.pages import esc, link, page, topic_path

# action -> (title, [(label, field, kind)]) with kind "text", "number" or a choice "a|b|c"
_NUMBER, _TEXT = "number", "text"
FORMS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "create-topic": (
        "Create a topic",
        [
            ("Name", "topic", _TEXT),
            ("Partitions", "partitions", _NUMBER),
            ("Replication factor", "replication_factor", _NUMBER),
            ("Configs (name=value, ...)", "configs", _TEXT),
        ],
    ),
    "add-partitions": (
        "Add partitions",
        [("Topic", "topic", _TEXT), ("New partition count", "count", _NUMBER)],
    ),
    "alter-config": (
        "Alter a topic config",
        [
            ("Topic", "topic", _TEXT),
            ("Config", "name", _TEXT),
            ("Value (empty: back to the default)", "value", _TEXT),
        ],
    ),
    "delete-records": (
        "Delete records",
        [
            ("Topic", "topic", _TEXT),
            ("Partition", "partition", _NUMBER),
            ("Before offset", "offset", _NUMBER),
        ],
    ),
    "reset-offsets": (
        "Reset a group's offsets",
        [
            ("Group", "group", _TEXT),
            ("Topic", "topic", _TEXT),
            ("To", "to", "earliest|latest|offset"),
            ("Offset (for To = offset)", "offset", _NUMBER),
        ],
    ),
}
_DEFAULTS = {"partitions": "1", "replication_factor": "1", "to": "earliest"}


def action_path(action: str) -> str:
    return f"/ui/actions/{action}"


def _input(name: str, kind: str, value: str) -> str:
    if "|" in kind:
        options = "".join(
            f"<option value='{esc(o)}'{' selected' if o == value else ''}>{esc(o)}</option>"
            for o in kind.split("|")
        )
        return f"<select name='{esc(name)}'>{options}</select>"
    size = 8 if kind == "number" else 40
    return f"<input name='{esc(name)}' value='{esc(value)}' size='{size}'>"


def form_page(action: str, values: Mapping[str, str], csrf: str) -> str:
    title, fields = FORMS[action]
    rows = "".join(
        f"<tr><th>{esc(label)}</th><td>{_input(name, kind, values.get(name, _DEFAULTS.get(name, '')))}</td>"
        "</tr>"
        for label, name, kind in fields
    )
    body = (
        f"<form method='post' action='{esc(action_path(action))}' id='action-form'><table>{rows}</table>"
        f"<input type='hidden' name='csrf' value='{esc(csrf)}'><button>Review</button></form>"
        "<p class='muted'>Nothing changes until you confirm on the next page.</p>"
    )
    return page(title, body)


def confirm_page(action: str, description: str, values: Mapping[str, str], csrf: str) -> str:
    title, fields = FORMS[action]
    hidden = "".join(
        f"<input type='hidden' name='{esc(name)}' value='{esc(values.get(name, ''))}'>"
        for _, name, _ in fields
    )
    body = (
        f"<p id='confirm-what'>{esc(description)}</p>"
        f"<form method='post' action='{esc(action_path(action))}' id='confirm-form'>{hidden}"
        f"<input type='hidden' name='csrf' value='{esc(csrf)}'>"
        "<input type='hidden' name='confirm' value='yes'>"
        f"<button id='confirm'>Confirm</button> {link(back_link(action, values), 'Cancel')}</form>"
    )
    return page(f"Confirm: {title.lower()}", body)


def result_page(action: str, ok: bool, message: str, values: Mapping[str, str]) -> str:
    cls = "ok" if ok else "bad"
    title = FORMS[action][0] + (": done" if ok else ": refused")
    back = link(back_link(action, values), "Back")
    body = f"<p class='{cls}' id='action-result'>{esc(message)}</p><p>{back}</p>"
    return page(title, body)


def back_link(action: str, values: Mapping[str, str]) -> str:
    if action == "reset-offsets" and values.get("group"):
        return f"/ui/groups/{quote(values['group'], safe='')}"
    if values.get("topic") and action != "create-topic":
        return topic_path(values["topic"])
    return "/ui/topics"


def action_links(items: Sequence[tuple[str, str, str]]) -> str:
    """Links to action forms: (action, text, query string)."""
    shown = " · ".join(link(f"{action_path(a)}{'?' + q if q else ''}", text) for a, text, q in items)
    return f"<p class='actions' id='actions'>Actions: {shown}</p>"
