"""The console's schema registry pages (pure: the registry's state in, HTML out).

``/ui/schemas`` lists the subjects (latest version, its type and id, the subject's compatibility level
and mode, each either the subject's own or the registry-wide one it falls back to);
``/ui/schemas/<subject>`` shows one subject: every version (soft-deleted ones marked), the text of one
version (``?version=``, the latest by default; JSON schemas re-indented so that a diff is by field),
and a line diff between two versions (``?diff=<a>,<b>``) as a unified diff with added and removed lines
coloured. Every registry served on a broker is the same replay of ``_schemas``, so any broker draws
these pages.
"""

from __future__ import annotations

import difflib
import json
from urllib.parse import quote

from strom.registry.records import SchemaValue
from strom.registry.registry import SchemaRegistry
from strom.web.console.pages import esc, link, page, table


def subject_path(subject: str) -> str:
    return f"/ui/schemas/{quote(subject, safe='')}"


def _setting(own: str | None, effective: str) -> str:
    return esc(effective) if own is not None else f"{esc(effective)} <span class='muted'>(global)</span>"


def subjects_page(registry: SchemaRegistry, subjects: list[str]) -> str:
    state = registry.state
    rows = []
    for subject in subjects:
        latest = registry.version(subject, None)
        rows.append(
            [link(subject_path(subject), subject), esc(latest.version), esc(latest.schema_type),
             esc(latest.schema_id), _setting(state.configs.get(subject), registry.compatibility(subject)),
             _setting(state.modes.get(subject), registry.mode(subject))]
        )  # fmt: skip
    facts = table(
        ["Global compatibility", "Global mode", "Schemas (ids)"],
        [[esc(registry.compatibility(None)), esc(registry.mode(None)), esc(len(state.schemas))]],
        "registry-facts",
    )
    listed = table(["Subject", "Latest version", "Type", "Id", "Compatibility", "Mode"], rows, "subjects")
    note = "<p class='muted'>Subjects you may describe (registry ACLs on resource type Subject).</p>"
    return page("Schemas", facts + listed + note)


def readable(value: SchemaValue) -> str:
    """The schema text to show and diff: JSON (Avro, JSON Schema) re-indented, Protobuf as stored."""
    if value.schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(value.schema), indent=2)
        except ValueError:
            return value.schema
    return value.schema


def diff_html(old: SchemaValue, new: SchemaValue) -> str:
    lines = difflib.unified_diff(
        readable(old).splitlines(), readable(new).splitlines(), f"version {old.version}",
        f"version {new.version}", lineterm="", n=3,
    )  # fmt: skip
    out = []
    for line in lines:
        cls = (
            "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "muted"
            if line.startswith("@@")
            else ""
        )
        out.append(f"<span class='{cls}'>{esc(line)}</span>" if cls else esc(line))
    if not out:
        return "<p id='diff'>The two versions' texts are the same.</p>"
    return "<pre id='diff'>" + "\n".join(out) + "</pre>"


def _diff_link(base: str, version: int) -> str:
    return link(f"{base}?diff={version - 1},{version}", f"diff with {version - 1}") if version > 1 else ""


def subject_page(
    registry: SchemaRegistry, subject: str, shown: int | None, diff: tuple[int, int] | None
) -> str:
    versions = registry.state.versions(subject, deleted=True)
    base = subject_path(subject)
    rows = [
        [link(f"{base}?version={v.version}", v.version), esc(v.schema_id), esc(v.schema_type),
         esc(", ".join(f"{r.name} → {r.subject} v{r.version}" for r in v.references) or "-"),
         "<span class='bad'>deleted</span>" if v.deleted else "",
         _diff_link(base, v.version)]
        for v in versions
    ]  # fmt: skip
    settings = table(
        ["Compatibility", "Mode"],
        [[_setting(registry.state.configs.get(subject), registry.compatibility(subject)),
          _setting(registry.state.modes.get(subject), registry.mode(subject))]],
        "subject-settings",
    )  # fmt: skip
    listing = table(["Version", "Id", "Type", "References", "", "Diff"], rows, "versions")
    by_number = {v.version: v for v in versions}
    body = settings + "<h2>Versions</h2>" + listing
    numbers = sorted(by_number)
    form = (
        f"<form method='get' id='diff-form'>Diff version <input name='a' size='3' value='{numbers[0]}'> "
        f"with <input name='b' size='3' value='{numbers[-1]}'> <button>Compare</button></form>"
    )
    body += form
    if diff is not None:
        old, new = by_number.get(diff[0]), by_number.get(diff[1])
        if old is None or new is None:
            body += f"<p class='bad' id='diff'>No version {diff[0] if old is None else diff[1]}.</p>"
        else:
            body += f"<h2>Diff: version {old.version} → {new.version}</h2>" + diff_html(old, new)
    else:
        value = by_number.get(shown) if shown is not None else versions[-1]
        if value is None:
            body += f"<p class='bad'>No version {shown}.</p>"
        else:
            body += f"<h2>Version {value.version} (id {value.schema_id})</h2>"
            body += f"<pre id='schema'>{esc(readable(value))}</pre>"
    return page(f"Subject {subject}", body)
