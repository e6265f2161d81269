"""JSON Schema schemas for the registry: validation, the stored text, ``$ref`` resolution.

**Validation.** The document must be JSON whose top level is an object or a boolean, valid against its
dialect's meta-schema (``$schema``; draft 7 when absent, as Confluent's registry assumes), checked by
the ``jsonschema`` package. Every ``$ref`` in it must resolve (inside the document, or to a referenced
schema), so that a schema never names a type the registry cannot see.

**References.** Confluent's ``references`` give other subjects' versions a *name*, and ``$ref`` uses
that name as a URI: ``{"$ref": "address.json"}`` with a reference named ``address.json``. The
``referencing`` package resolves them: each referenced document is a resource under its name, under
the name joined to the referring document's ``$id`` (a relative ``$ref`` resolves against it), and
under its own ``$id``. Nested ``$ref`` inside a referenced document resolve against that document.

**Canonical text.** The registry stores the document as compact JSON (no insignificant whitespace),
keeping the order of object keys as written, as Confluent's registry does; with ``normalize=true``
the keys are sorted too, so that two registrations differing only in key order are the same schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias
from urllib.parse import urljoin

import jsonschema.exceptions
import jsonschema.validators
import referencing.exceptions
import referencing.jsonschema
from referencing import Registry, Resource
from referencing._core import Resolver as _Resolver  # the type of Registry.resolver(), not re-exported

from strom._util.json_types import JsonValue
from strom.registry.avro import MAX_DEPTH, depth
from strom.registry.errors import invalid_schema

Resolver: TypeAlias = _Resolver[JsonValue]


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """A validated JSON Schema: its stored text, its document, and the resolver of its ``$ref``."""

    canonical: str
    document: JsonValue
    resolver: Resolver


def _load(text: str, what: str) -> JsonValue:
    if depth(text) > MAX_DEPTH:
        raise invalid_schema(f"{what} is nested more than {MAX_DEPTH} levels deep")
    try:
        document: JsonValue = json.loads(text)
        return document
    except (ValueError, TypeError) as exc:
        raise invalid_schema(f"{what} is not valid JSON: {exc}") from None


def _resource(document: JsonValue) -> Resource[JsonValue]:
    return Resource.from_contents(document, default_specification=referencing.jsonschema.DRAFT7)


def parse(text: str, references: Sequence[tuple[str, str]] = (), normalize: bool = False) -> JsonSchema:
    """Validate ``text``; ``references`` are (name, text) of every schema it may ``$ref``.

    Raises:
        RegistryError: 42201 when a text is not JSON, not a valid schema, or has a ``$ref`` that does
            not resolve.
    """
    document = _load(text, "the schema")
    if not isinstance(document, dict | bool):
        raise invalid_schema("a JSON schema is an object or a boolean")
    _check_schema(document)
    base = str(document.get("$id", "")) if isinstance(document, dict) else ""
    registry: Registry[JsonValue] = Registry()
    for name, ref_text in references:
        ref_doc = _load(ref_text, f"the referenced schema {name!r}")
        resource = _resource(ref_doc)
        uris = {name, urljoin(base, name)} if base else {name}
        if resource.id():
            uris.add(str(resource.id()))
        registry = registry.with_resources((uri, resource) for uri in uris)
    main = _resource(document)
    registry = registry.with_resource(base, main).crawl()
    resolver = registry.resolver(base)
    for ref, scope in _refs(document, resolver):
        try:
            scope.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            raise invalid_schema(f"$ref {ref!r} does not resolve: {exc}") from None
    canonical_doc = _sorted(document) if normalize else document
    canonical = json.dumps(canonical_doc, separators=(",", ":"), ensure_ascii=False)
    return JsonSchema(canonical, document, resolver)


def _check_schema(document: JsonValue) -> None:
    validator = jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(document)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise invalid_schema(f"{exc.message} (at #/{where})") from None
    except RecursionError:
        raise invalid_schema("the schema is nested too deeply") from None


def _refs(node: JsonValue, resolver: Resolver) -> Iterator[tuple[str, Resolver]]:
    """Every ``$ref`` in ``node`` with the resolver of its scope (a nested ``$id`` opens a new one)."""
    if isinstance(node, list):
        for item in node:
            yield from _refs(item, resolver)
    elif isinstance(node, dict):
        if isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(_resource(node))
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref, resolver
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                yield from _refs(value, resolver)


def _sorted(node: JsonValue) -> JsonValue:
    if isinstance(node, dict):
        return {key: _sorted(node[key]) for key in sorted(node)}
    if isinstance(node, list):
        return [_sorted(item) for item in node]
    return node
