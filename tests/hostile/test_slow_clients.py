"""Connections that stall: every vramdoc server closes one whose headers stop, answers a stalled
body 408, and still serves ordinary keep-alive requests. Real uvicorn servers on loopback, each with
the options `vramdoc serve`, `vramdoc bot --http` and `vramdoc agent` run with."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from litestar import Litestar
from slack_bolt.async_app import AsyncApp

from bot.gateway import create_gateway
from service.agent.app import AgentIdentity
from service.agent.app import create_app as create_agent
from service.agent.settings import AgentSettings
from service.api.app import create_app as create_service
from service.api.settings import Settings
from service.packs import load_packs
from service.serving import HeaderDeadlineProtocol, server_options

HEADER_TIMEOUT_S = 0.5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _running(app: Litestar) -> Iterator[int]:
    config = uvicorn.Config(app, host="127.0.0.1", port=_free_port(), log_level="warning", **server_options())
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(400):
        if server.started:
            break
        time.sleep(0.05)
    try:
        yield config.port
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def _service() -> Litestar:
    return create_service(Settings(rate_limit=None, body_timeout_s=0.5), packs=load_packs())


def _bot() -> Litestar:
    bolt = AsyncApp(token="xoxb-hostile", signing_secret="s", request_verification_enabled=False)
    return create_gateway(
        bolt, signing_secret="hostile-signing-secret", max_body_bytes=2**20, body_timeout_s=0.5
    )


def _agent() -> Litestar:
    return create_agent(
        AgentSettings(vllm_urls=()), AgentIdentity(host="gpu-h", url="http://gpu-h", token="t" * 32)
    )


SERVERS: dict[str, tuple[Callable[[], Litestar], str]] = {
    "service": (_service, "/v1/diagnose"),
    "bot": (_bot, "/slack/events"),
    "agent": (_agent, "/healthz"),
}


@pytest.fixture(params=sorted(SERVERS))
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, str]]:
    monkeypatch.setattr(HeaderDeadlineProtocol, "header_timeout_s", HEADER_TIMEOUT_S)
    build, post_path = SERVERS[request.param]
    with _running(build()) as port:
        yield port, post_path


def _closed_within(sock: socket.socket, limit_s: float) -> bool:
    """Whether the server closes the connection (recv gives b"") before `limit_s` passes."""
    sock.settimeout(limit_s)
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except TimeoutError:
        return False


def test_a_connection_that_stops_mid_headers_is_closed(server: tuple[int, str]) -> None:
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert _closed_within(sock, 10)
    with socket.create_connection(("127.0.0.1", port)) as silent:
        assert _closed_within(silent, 10)


def test_a_second_request_that_stalls_on_a_kept_alive_connection_is_closed(server: tuple[int, str]) -> None:
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        assert _closed_within(sock, 10)


def test_a_body_that_stops_arriving_is_answered_408(server: tuple[int, str]) -> None:
    port, path = server
    if path == "/healthz":
        pytest.skip("the agent takes no request bodies")
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n"
            "Connection: close\r\n\r\nonly a little".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
