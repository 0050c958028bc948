"""Prometheus metrics and Sentry error reporting, both safe for pasted logs full of secrets.

Sentry's Litestar integration attaches request bodies and frame locals even with
`send_default_pii=False`; we turn both off and pass every string of every event and breadcrumb
through `redact`, because an exception message can quote a log line.
"""

from __future__ import annotations

from typing import Any

import sentry_sdk
from litestar import Response, get
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController
from prometheus_client import CONTENT_TYPE_LATEST, Counter
from sentry_sdk.integrations.litestar import LitestarIntegration

from service.redact import redact

__all__ = ["DIAGNOSES", "MetricsController", "init_sentry", "prometheus_config", "scrub"]

DIAGNOSES = Counter(
    "vramdoc_diagnoses_total", "Diagnoses answered, by endpoint and root phase.", ["endpoint", "phase"]
)

_DROPPED_REQUEST_KEYS = ("data", "cookies", "env")


def prometheus_config() -> PrometheusConfig:
    """Request counts and latency by route template, method and status (bounded label cardinality)."""
    return PrometheusConfig(
        app_name="vramdoc",
        prefix="vramdoc_http",
        group_path=True,
        exclude=["/metrics"],
        buckets=[0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
    )


class MetricsController(PrometheusController):
    """`GET /metrics`, documented as the Prometheus text it serves, not as JSON."""

    @get(
        media_type=CONTENT_TYPE_LATEST,
        summary="Prometheus metrics: requests, latency, diagnoses by phase",
        tags=["operations"],
    )
    async def get(self) -> Response[bytes]:
        response: Response[bytes] = await PrometheusController.get.fn(self)
        return response


def scrub(value: Any) -> Any:
    """Redact every string inside an event, breadcrumb or any nested value."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: scrub(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    return value


def _before_send(event: Any, _hint: Any) -> Any:
    request = event.get("request")
    if isinstance(request, dict):
        for key in _DROPPED_REQUEST_KEYS:
            request.pop(key, None)
        headers = request.get("headers")
        if isinstance(headers, dict):
            request["headers"] = {
                k: v for k, v in headers.items() if k.lower() not in {"authorization", "cookie"}
            }
    return scrub(event)


def _before_breadcrumb(crumb: Any, _hint: Any) -> Any:
    return scrub(crumb)


def init_sentry(dsn: str, environment: str | None = None) -> None:
    """Report unhandled errors to Sentry without request bodies, locals or unredacted text."""
    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        integrations=[LitestarIntegration()],
        send_default_pii=False,
        include_local_variables=False,
        max_request_body_size="never",
        before_send=_before_send,
        before_breadcrumb=_before_breadcrumb,
        traces_sample_rate=0.0,
    )
