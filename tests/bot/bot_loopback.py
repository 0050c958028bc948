"""Loopback helpers for the bot's tests and bench: serving ASGI apps, signing Slack requests,
registering agents the way agents do.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import httpx
import redis.asyncio as aioredis
import uvicorn
from agent_standin import AGENT_TOKEN
from litestar import Litestar
from slack_sdk.signature import SignatureVerifier
from slack_standin import BOT_TOKEN, BOT_USER, SlackStandin

from bot.answers import Backends
from bot.settings import BotSettings
from service.agent.registry import register
from service.schemas import AgentRegistration, GpuSummary

SIGNING_SECRET = "standin-signing-secret-8f14e45fceea167a"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def serve(app: Litestar) -> tuple[str, Callable[[], Awaitable[None]]]:
    """Run an ASGI app on a free loopback port in this event loop; returns its URL and a stopper."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 20
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            await task
            raise RuntimeError(f"the app did not start on port {port}")
        await asyncio.sleep(0.01)

    async def stop() -> None:
        server.should_exit = True
        await task

    return f"http://127.0.0.1:{port}", stop


async def register_agent(client: aioredis.Redis, key_prefix: str, host: str, url: str) -> None:
    """Register an agent with the agent's own registry writer (45 s TTL), under this test's prefix."""
    entry = AgentRegistration(
        host=host,
        url=url,
        gpus=[GpuSummary(index=0, name="NVIDIA H100 80GB HBM3", total_gib=79.65, free_gib=1.75)],
        registered_at="2026-11-29T16:20:00Z",
        version="0.1.0",
    )
    await register(client, entry, 45, prefix=f"{key_prefix}agent:")


def closed_port_url() -> str:
    """A loopback URL where nothing listens: the service is down."""
    return f"http://127.0.0.1:{free_port()}"


def bot_settings(
    slack: SlackStandin, redis_url: str | None, service_url: str, **overrides: Any
) -> BotSettings:
    values: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "signing_secret": SIGNING_SECRET,
        "service_url": service_url,
        "redis_url": redis_url,
        "agent_token": AGENT_TOKEN,
        "slack_api_url": slack.base_url,
        "agent_timeout_s": 1.0,
        "service_timeout_s": 10.0,
    }
    values.update(overrides)
    return BotSettings(**values)


def _signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's signature of a body; Slack only sends UTF-8, which SignatureVerifier assumes."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return "v0=" + "0" * 64  # no UTF-8 text to sign: the gateway cannot verify it either
    return SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body) or ""


class BotServer:
    """The bot's HTTP gateway on loopback plus helpers that send Slack-signed requests to it."""

    def __init__(self, url: str, backends: Backends) -> None:
        self.url = url
        self.backends = backends
        self.http = httpx.AsyncClient(base_url=url, timeout=10)

    async def send(
        self,
        body: bytes,
        *,
        content_type: str = "application/json",
        timestamp: int | None = None,
        secret: str = SIGNING_SECRET,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        signed = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": _signature(secret, ts, body),
            **(headers or {}),
        }
        return await self.http.post("/slack/events", content=body, headers=signed)

    async def event(
        self, event: dict[str, Any], *, event_id: str = "Ev0001", retry: int | None = None
    ) -> httpx.Response:
        body = {
            "token": "legacy",
            "team_id": "T0001",
            "api_app_id": "A0001",
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [{"team_id": "T0001", "user_id": BOT_USER, "is_bot": True}],
            "event": event,
        }
        headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"} if retry else None
        return await self.send(json.dumps(body).encode(), headers=headers)

    async def form(self, fields: dict[str, str]) -> httpx.Response:
        return await self.send(urlencode(fields).encode(), content_type="application/x-www-form-urlencoded")

    async def interaction(self, payload: dict[str, Any]) -> httpx.Response:
        return await self.form({"payload": json.dumps(payload)})


def mention(
    text: str, *, ts: str = "1700000000.000100", thread_ts: str | None = None, **extra: Any
) -> dict[str, Any]:
    event = {
        "type": "app_mention",
        "user": "U0PERSON",
        "text": f"<@{BOT_USER}> {text}",
        "ts": ts,
        "channel": "C0CHANNEL",
        "event_ts": ts,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    event.update(extra)
    return event
