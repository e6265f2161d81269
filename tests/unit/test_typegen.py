"""strom.protocol.typegen: the checked-in messages.py is what the installed specs generate, and its
Required/NotRequired split is what the codec's decoders actually put in a body."""

from __future__ import annotations

from typing import Any

import pytest

from strom.protocol import messages, typegen
from strom.protocol.api import INTERNAL, SUPPORTED
from strom.protocol.codec import decode_request, decode_response, encode_request, encode_response
from strom.protocol.spec import FieldSpec, MessageSpec, request_spec, response_spec


def test_checked_in_messages_match_the_installed_specs() -> None:
    # Fails after a kafka-python upgrade that changes a spec: run python -m strom.protocol.typegen.
    expected = typegen.messages_source()
    assert typegen.TARGET.read_text("utf-8") == expected


def test_check_mode_reports_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert typegen.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def _sample(fields: tuple[FieldSpec, ...], version: int) -> dict[str, Any]:
    """A body whose every struct (and struct array, with one element) is there, scalars left out."""
    body: dict[str, Any] = {}
    for f in fields:
        if f.present(version) and f.type == "struct":
            inner = _sample(f.fields, version)
            body[f.attr] = [inner] if f.is_array else inner
    return body


def _check(body: dict[str, Any], type_name: str, spec: MessageSpec, fields: tuple[FieldSpec, ...]) -> int:
    """Keys of ``body`` against the TypedDict ``type_name``; recurses into structs; counts the dicts."""
    typed = getattr(messages, type_name)
    keys = set(body)
    assert typed.__required_keys__ <= keys, (type_name, typed.__required_keys__ - keys)
    assert keys <= typed.__required_keys__ | typed.__optional_keys__, (type_name, keys)
    checked = 1
    for f in fields:
        if f.type == "struct" and body.get(f.attr):
            value = body[f.attr]
            inner_name = typegen._type_name(spec, f.struct_name)
            for element in value if f.is_array else [value]:
                checked += _check(element, inner_name, spec, f.fields)
    return checked


@pytest.mark.parametrize("key", sorted({**SUPPORTED, **INTERNAL}), ids=lambda k: k.name)
def test_required_fields_are_the_ones_every_version_decodes(key: Any) -> None:
    low, high = {**SUPPORTED, **INTERNAL}[key]
    request, response = request_spec(key), response_spec(key)
    assert request is not None and response is not None
    checked = 0
    for version in range(low, min(high, request.max_version) + 1):
        frame = encode_request(key, version, 7, "typegen", _sample(request.fields, version))
        decoded = decode_request(frame[4:]).body
        checked += _check(decoded, request.name, request, request.fields)
    for version in range(low, min(high, response.max_version) + 1):
        frame = encode_response(key, version, 7, _sample(response.fields, version))
        _, body = decode_response(key, version, frame[4:])
        checked += _check(body, response.name, response, response.fields)
    assert checked >= 2 * (high - low + 1)
