"""`serve`: the broker's entry point (`strom.broker.main.serve`) with the HTTP side plugged in."""

from __future__ import annotations

from strom.broker.main import serve as serve_broker
from strom.web.side import start_http_side


def serve(config_file: str | None, overrides: list[str]) -> int:
    return serve_broker(config_file, overrides, start_http_side)
