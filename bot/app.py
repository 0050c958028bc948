"""The bolt AsyncApp: one Web API client (429s and dropped connections retried by the SDK) and the
Slack surfaces, each registered by its own module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bot.answers import Backends
from bot.clients import AgentClient, ServiceClient
from bot.hosts import HostDirectory, load_hosts_file
from bot.listeners import actions, commands, events, memory, shortcuts
from bot.memory import TeamMemory
from bot.settings import BotSettings
from bot.state import open_state
from service.redis_link import connect_redis

__all__ = ["build_backends", "create_app", "web_client"]

SLACK_API_URL = "https://slack.com/api/"


def web_client(settings: BotSettings) -> AsyncWebClient:
    """Slack's Web API client; VRAMDOC_SLACK_API_URL points it at another base URL (tests' stand-in)."""
    base = (settings.slack_api_url or SLACK_API_URL).rstrip("/") + "/"
    return AsyncWebClient(
        token=settings.bot_token,
        base_url=base,
        timeout=10,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=1),
            AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        ],
    )


def build_backends(settings: BotSettings, *, key_prefix: str | None = None) -> Backends:
    """State, host directory and HTTP clients from settings; the hosts file is read (and checked) here.

    Keys live under the installation's VRAMDOC_REDIS_PREFIX, as the service's and the agents' do.
    """
    key_prefix = key_prefix if key_prefix is not None else f"{settings.redis_prefix}:"
    state = open_state(
        settings.redis_url,
        key_prefix=key_prefix,
        dedup_ttl_s=settings.dedup_ttl_s,
        thread_ttl_s=settings.thread_ttl_s,
    )
    registry = connect_redis(settings.redis_url, timeout_s=1.0) if settings.redis_url else None
    static = load_hosts_file(settings.hosts_file) if settings.hosts_file else {}
    return Backends(
        settings,
        state=state,
        directory=HostDirectory(registry, static, key_prefix=key_prefix),
        service=ServiceClient(
            settings.service_url, timeout_s=settings.service_timeout_s, token=settings.service_token
        ),
        agents=AgentClient(settings.agent_token, timeout_s=settings.agent_timeout_s),
        memory=TeamMemory(
            connect_redis(settings.redis_url, timeout_s=1.0),
            key_prefix=key_prefix,
            retention_days=settings.memory_retention_days,
        )
        if settings.redis_url
        else None,
    )


def create_app(
    settings: BotSettings, backends: Backends, *, client: AsyncWebClient | None = None
) -> AsyncApp:
    """The bolt app with every surface registered.

    bolt does not check signatures: over HTTP the gateway verifies each request once before bolt
    sees it, and Socket Mode has none.
    """
    app = AsyncApp(
        client=client or web_client(settings),
        signing_secret=settings.signing_secret or "",
        request_verification_enabled=False,
        process_before_response=False,
    )

    async def attach_backends(context: AsyncBoltContext, next: Callable[[], Awaitable[None]]) -> None:
        context["backends"] = backends
        await next()

    app.use(attach_backends)
    for surface in (events, commands, shortcuts, actions, memory):
        surface.register(app)
    return app
