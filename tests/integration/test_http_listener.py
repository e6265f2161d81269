"""The HTTP listener's rules: a taken default port is a warning, a taken explicit one a start-up error,
an empty ``http.listeners`` turns HTTP off; mounted routes are served. Never on the real port 8081."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from strom._util.errors import ConfigError
from strom.testing import BrokerProcess
from strom.web.server import HttpServer

STROM = [sys.executable, "-m", "strom.cli.main"]


def taken_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock, sock.getsockname()[1]


def test_default_listener_on_a_taken_port_warns_and_runs_without_http(
    caplog: pytest.LogCaptureFixture,
) -> None:
    holder, port = taken_port()
    with holder:
        server = HttpServer([f"http://127.0.0.1:{port}"], default_listener=True)
        with caplog.at_level(logging.WARNING):
            assert asyncio.run(server.start()) == []
    assert "running without HTTP" in caplog.text
    assert "set http.listeners=http://127.0.0.1:PORT" in caplog.text  # the fix, named


def test_explicit_listener_on_a_taken_port_is_an_error() -> None:
    holder, port = taken_port()
    with holder, pytest.raises(ConfigError, match="cannot bind"):
        asyncio.run(HttpServer([f"http://127.0.0.1:{port}"], default_listener=False).start())


def test_mounted_routes_are_served() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def scenario() -> str:
        server = HttpServer(["http://127.0.0.1:0"], default_listener=False)
        server.mount([web.get("/hello", hello)])
        ((host, port),) = await server.start()
        try:
            loop = asyncio.get_running_loop()
            url = f"http://{host}:{port}/hello"
            return await loop.run_in_executor(
                None, lambda: urllib.request.urlopen(url, timeout=10).read().decode()
            )
        finally:
            await server.stop()

    assert asyncio.run(scenario()) == "hello"


def test_serve_fails_at_start_when_an_explicit_listener_cannot_bind(tmp_path: Path) -> None:
    holder, port = taken_port()
    with holder:
        result = subprocess.run(
            [
                *STROM,
                "serve",
                "--set",
                f"log.dirs={tmp_path}",
                "--set",
                "listeners=PLAINTEXT://127.0.0.1:0",
                "--set",
                f"http.listeners=http://127.0.0.1:{port}",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert "cannot bind http.listeners" in result.stderr.strip().splitlines()[-1]


def test_empty_http_listeners_turns_http_off(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", {"http.listeners": ""}) as broker:
        assert broker.http_url is None
        assert "HTTP" not in broker.log_tail()
