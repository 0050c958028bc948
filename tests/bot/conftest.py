"""Fixtures for the bot: Slack's Web API stand-in, agent stand-ins, a real Redis, and the bot itself
served over loopback by uvicorn exactly as `vramdoc bot --http` serves it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
import uvicorn
from agent_standin import AgentStandin
from bot_loopback import SIGNING_SECRET, BotServer, bot_settings, free_port, serve
from slack_standin import SlackStandin

from bot.app import build_backends, create_app
from bot.gateway import create_gateway


@pytest.fixture
async def slack() -> AsyncIterator[SlackStandin]:
    standin = SlackStandin()
    await standin.start()
    yield standin
    await standin.stop()


@pytest.fixture
async def agent() -> AsyncIterator[AgentStandin]:
    standin = AgentStandin(host="gpu-07")
    await standin.start()
    yield standin
    await standin.stop()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def start_bot(
    slack: SlackStandin, redis_url: str, key_prefix: str
) -> AsyncIterator[Callable[..., Awaitable[BotServer]]]:
    """Factory: start the bot over loopback with settings overrides; everything stops after the test."""
    stoppers: list[Callable[[], Awaitable[None]]] = []

    async def start(service_url: str, **overrides: Any) -> BotServer:
        settings = bot_settings(slack, overrides.pop("redis_url", redis_url), service_url, **overrides)
        backends = build_backends(settings, key_prefix=key_prefix)
        gateway = create_gateway(
            create_app(settings, backends),
            signing_secret=SIGNING_SECRET,
            max_body_bytes=settings.max_body_bytes,
            claim=backends.state.claim_event,
        )
        url, stop = await serve(gateway)
        server = BotServer(url, backends)

        async def close() -> None:
            await server.http.aclose()
            await stop()
            await backends.close()

        stoppers.append(close)
        return server

    yield start
    for stop in reversed(stoppers):
        await stop()


@pytest.fixture(scope="session")
def service_url() -> Iterator[str]:
    """The real vramdoc service (packs loaded in its lifespan, in-memory state) on a loopback port,
    started once per session in its own thread and event loop, as a separate process would be."""
    from service.api.app import create_app
    from service.api.settings import Settings

    port = free_port()
    config = uvicorn.Config(
        create_app(Settings(rate_limit=None)), host="127.0.0.1", port=port, log_level="warning", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="vramdoc-service", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the vramdoc service did not start")
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)
