"""JSON value types shared by the modules that read or write JSON documents.

Documents whose keys are fixed get a precise type next to the code that owns them; these aliases are for the
genuinely open remainder (schema documents, response bodies under construction). ``JsonValue`` nests
through the read-only ``Sequence``/``Mapping`` so that a caller's ``list[int]`` or ``dict[str, str]`` is
accepted where a JSON value is written (``list`` and ``dict`` are invariant); code reading parsed JSON
narrows with ``isinstance`` as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
"""Any JSON value, as ``json.dumps`` accepts it and ``json.loads`` returns it."""

JsonObject: TypeAlias = "dict[str, JsonValue]"
"""A JSON object whose keys are open (a body under construction, a parsed document not yet checked)."""
