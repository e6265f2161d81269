"""A tiny HTTP client for registry tests (urllib): status, content type and decoded JSON body."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(
    base_url: str,
    method: str,
    path: str,
    body: Any = None,
    raw: bytes | None = None,
    content_type: str = CONTENT_TYPE,
    timeout_s: float = 30.0,
) -> tuple[int, str, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(base_url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, headers, payload = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, headers, payload = exc.code, exc.headers, exc.read()
    return status, headers.get("Content-Type", ""), json.loads(payload) if payload else None
