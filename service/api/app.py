"""The Litestar application: settings in, an ASGI app out.

Rule packs load once per worker in the lifespan and sit read-only on `app.state`; a broken pack
raises PackError (file, rule, field) and the worker never starts serving.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from litestar import Litestar, Router
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import ScalarRenderPlugin

from service.api.access import admit
from service.api.bench_route import bench_handlers
from service.api.monitoring import MetricsController, init_sentry, prometheus_config
from service.api.openapi import add_request_components
from service.api.problems import exception_handlers
from service.api.routes import V1_HANDLERS, health_handlers
from service.api.settings import Settings
from service.api.stores import SharedState
from service.api.team import TEAM_HANDLERS
from service.api.views import Loaded
from service.calibration_store import CalibrationStore
from service.core import load_rules
from service.packs import RulePacks
from service.redis_link import connect_redis
from service.serving import StalledBodyGuard, return_large_blocks
from service.team_memory import TeamMemory

__all__ = ["create_app", "create_app_from_env"]

log = logging.getLogger("vramdoc.service")

# team memory and calibration are read on request; a Redis slower than this is reported, not awaited
_TEAM_REDIS_TIMEOUT_S = 1.0


def _lifespan(
    settings: Settings, preloaded: RulePacks | None, clock: Callable[[], float]
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        packs = preloaded or load_rules(settings.rules_dir)
        shared = SharedState(
            settings.redis_url, namespace=settings.redis_prefix, cache_max_entries=settings.cache_max_entries
        )
        client = None
        memory, calibration = None, None
        if settings.redis_url is not None:
            client = connect_redis(settings.redis_url, timeout_s=_TEAM_REDIS_TIMEOUT_S)
            prefix, days = f"{settings.redis_prefix}:", settings.memory_retention_days
            memory = TeamMemory(client, key_prefix=prefix, retention_days=days)
            calibration = CalibrationStore(client, key_prefix=prefix, retention_days=days)
        app.state.loaded = Loaded.build(
            settings, packs, shared, clock, memory=memory, calibration=calibration
        )
        log.info("vramdoc service ready: rules %s, redis %s", packs.digest, await shared.redis_status())
        try:
            yield
        finally:
            await shared.close()
            if client is not None:
                await client.aclose()

    return lifespan


def create_app(
    settings: Settings, *, packs: RulePacks | None = None, clock: Callable[[], float] = time.time
) -> Litestar:
    """Build the app; packs load when the ASGI server runs the lifespan, unless given already loaded.
    `clock` gives the rate limiter's wall-clock seconds."""
    if settings.sentry_dsn:
        init_sentry(settings.sentry_dsn, settings.sentry_environment)
    # bench_handlers() is empty unless VRAMDOC_BENCH_TRIVIAL_POST=1 (bench/service.py's peer endpoint)
    v1 = Router(
        "/v1",
        route_handlers=[*V1_HANDLERS, *TEAM_HANDLERS, *bench_handlers()],
        before_request=admit,
    )
    metrics = prometheus_config()
    app = Litestar(
        route_handlers=[v1, *health_handlers, MetricsController],
        lifespan=[_lifespan(settings, packs, clock)],
        exception_handlers=exception_handlers,
        middleware=[
            metrics.middleware,
            DefineMiddleware(StalledBodyGuard, timeout_s=settings.body_timeout_s),
        ],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="vramdoc",
            version="1",
            description="Diagnoses vLLM GPU-memory failures from logs, estimates budgets, ranks fixes.",
            path="/schema",
            render_plugins=[ScalarRenderPlugin()],
        ),
        debug=False,
    )
    add_request_components(app.openapi_schema)
    return app


def create_app_from_env() -> Litestar:
    """The factory `vramdoc serve` hands to uvicorn: each worker reads the same environment."""
    return_large_blocks()
    return create_app(Settings.from_env())
