"""Fixtures for the HTTP service: a real uvicorn server on a free loopback port, in a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from service.api.app import create_app
from service.api.settings import Settings
from service.packs import RulePacks

ServerFactory = Callable[[Settings], httpx.Client]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def unused_redis_url() -> str:
    """A Redis URL where nothing listens: connections are refused at once."""
    return f"redis://127.0.0.1:{_free_port()}/0"


@contextmanager
def running(
    settings: Settings, packs: RulePacks, clock: Callable[[], float] = time.time
) -> Iterator[httpx.Client]:
    """Serve `create_app(settings)` over loopback until the block ends; yield a client for it."""
    config = uvicorn.Config(
        create_app(settings, packs=packs, clock=clock),
        host="127.0.0.1",
        port=_free_port(),
        lifespan="on",
        ws="none",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start (see the log above)")
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{config.port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture
def serve(packs: RulePacks) -> Iterator[ServerFactory]:
    """Start servers with given settings for one test; all stop when it ends."""
    with contextlib.ExitStack() as stack:
        yield lambda settings: stack.enter_context(running(settings, packs))


@pytest.fixture
def serve_on_clock(packs: RulePacks) -> Iterator[Callable[[Settings, Callable[[], float]], httpx.Client]]:
    """Like `serve`, with the rate limiter reading the given clock instead of the wall clock."""
    with contextlib.ExitStack() as stack:
        yield lambda settings, clock: stack.enter_context(running(settings, packs, clock))


@pytest.fixture(scope="module")
def client(packs: RulePacks) -> Iterator[httpx.Client]:
    """One server with default settings, except no rate limit (tests send many requests)."""
    with running(Settings(rate_limit=None), packs) as client:
        yield client


ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]


def _check_problem(response: httpx.Response, status: int, kind: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, object] = response.json()
    assert body["type"] == f"urn:vramdoc:problem:{kind}"
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    detail = body["detail"]
    assert isinstance(detail, str) and detail.endswith(".") and "\n" not in detail
    return body


@pytest.fixture
def problem() -> ProblemCheck:
    """Check an RFC 9457 problem response (status, type URI, title, one-sentence detail); return its body."""
    return _check_problem
