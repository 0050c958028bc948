"""The agent's HTTP surface: `GET /v1/snapshot` behind a bearer token, `GET /healthz` open.

Snapshots list processes and command lines, so a request without the right token gets a bare 401
and nothing else. The token is compared with `hmac.compare_digest`, in constant time. When Redis is
configured the agent keeps itself registered for the bot (see `registry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from litestar import Litestar, Request, get
from litestar.datastructures import State
from litestar.response import Response

from service.agent.registry import Heartbeat, RegistrationBuilder
from service.agent.settings import AgentSettings
from service.agent.snapshot import collect_snapshot, gpu_summary, read_gpus, utc_now
from service.redis_link import connect_redis
from service.schemas import AgentRegistration, Snapshot

__all__ = ["AgentIdentity", "authorized", "create_app", "package_version"]

log = logging.getLogger("vramdoc.agent")


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """Who this agent is: its registry name, the URL the bot should call, and its secret."""

    host: str
    url: str
    token: str


def package_version() -> str:
    try:
        return version("vramdoc")
    except PackageNotFoundError:
        return "0+unknown"


def authorized(header: str | None, token: str) -> bool:
    """True when the Authorization header carries exactly this bearer token (constant-time compare)."""
    presented = ""
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer":
            presented = value.strip()
    return hmac.compare_digest(presented.encode(), token.encode())


def _unauthorized() -> Response[bytes]:
    return Response(
        content=b"", status_code=401, headers={"WWW-Authenticate": 'Bearer realm="vramdoc-agent"'}
    )


@get("/v1/snapshot")
async def snapshot(request: Request[object, object, State]) -> Response[bytes] | Snapshot:
    identity: AgentIdentity = request.app.state.identity
    if not authorized(request.headers.get("authorization"), identity.token):
        return _unauthorized()
    settings: AgentSettings = request.app.state.settings
    return await collect_snapshot(settings, identity.host)


@get("/healthz")
async def healthz(request: Request[object, object, State]) -> dict[str, object]:
    """`ok` while at least one GPU can be read; `degraded` (still 200: the process is alive) when none."""
    identity: AgentIdentity = request.app.state.identity
    reading = await read_gpus(request.app.state.settings)
    if reading.gpus:
        return {"status": "ok", "host": identity.host}
    reasons = [f"{e.source}: {e.reason}" for e in reading.errors] or ["no GPU was found"]
    return {"status": "degraded", "host": identity.host, "gpus": 0, "reasons": reasons}


def _registration_builder(settings: AgentSettings, identity: AgentIdentity) -> RegistrationBuilder:
    agent_version = package_version()

    async def build() -> AgentRegistration:
        reading = await read_gpus(settings)
        return AgentRegistration(
            host=identity.host,
            url=identity.url,
            gpus=gpu_summary(reading.gpus),
            registered_at=utc_now(),
            version=agent_version,
        )

    return build


@contextlib.asynccontextmanager
async def _registration(app: Litestar) -> AsyncIterator[None]:
    """Run the heartbeat for the app's lifetime when Redis is configured; deregister on shutdown."""
    settings: AgentSettings = app.state.settings
    identity: AgentIdentity = app.state.identity
    reading = await read_gpus(settings)
    if not reading.gpus:
        reasons = "; ".join(f"{e.source}: {e.reason}" for e in reading.errors) or "no GPU was found"
        log.warning("this agent can read no GPU, so its snapshots will have none (%s)", reasons)
    if settings.redis_url is None:
        log.info("VRAMDOC_REDIS_URL is not set: this agent will not register itself for the bot")
        yield
        return
    redis = connect_redis(settings.redis_url, timeout_s=5)
    heartbeat = Heartbeat(
        redis, _registration_builder(settings, identity), settings.heartbeat_s, app.state.registry_prefix
    )
    app.state.heartbeat = heartbeat
    task = asyncio.create_task(heartbeat.run(), name="vramdoc-agent-heartbeat")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await heartbeat.stop()
        await redis.aclose()


def create_app(
    settings: AgentSettings, identity: AgentIdentity, *, registry_prefix: str | None = None
) -> Litestar:
    """The agent app; it registers under `<VRAMDOC_REDIS_PREFIX>:agent:` unless `registry_prefix`
    says otherwise (test isolation)."""
    app = Litestar(
        route_handlers=[snapshot, healthz],
        lifespan=[_registration],
        openapi_config=None,
    )
    app.state.settings = settings
    app.state.identity = identity
    app.state.registry_prefix = registry_prefix or f"{settings.redis_prefix}:agent:"
    return app
