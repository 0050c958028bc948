"""Prometheus metrics and Sentry error reporting, both safe for pasted logs full of secrets.

Sentry never changes an answer. Its Litestar integration wraps the ASGI app and reads request
bodies (a multipart upload then never gets an answer, deeply nested JSON dies in its parser), so it
is not used, nor any integration that enables itself: the one place that answers 500 reports the
exception once (`report_failure`), 4xx problems are breadcrumbs at most, and each event carries the
method and route path, never a body, query string or header. Every string that does reach an event
or breadcrumb passes through `redact`, because an exception message can quote a log line.
`sentry_sdk` is imported by `init_sentry` only: without a DSN the service never loads it.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from litestar import Response, get
from litestar.enums import ScopeType
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController, PrometheusMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge
from uvicorn.config import LOGGING_CONFIG

from service.redact import redact_value
from service.schemas import CalibrationGroup

__all__ = [
    "CALIBRATION_ERROR",
    "CALIBRATION_SAMPLES",
    "DIAGNOSES",
    "PREFLIGHTS",
    "MetricsController",
    "RequestMetrics",
    "RedactedAccessLog",
    "access_log_config",
    "count_diagnosis",
    "count_preflight",
    "init_sentry",
    "note_problem",
    "prometheus_config",
    "publish_calibration",
    "report_failure",
    "scrub",
]

DIAGNOSES = Counter(
    "vramdoc_diagnoses_total", "Diagnoses answered, by endpoint and root phase.", ["endpoint", "phase"]
)

PREFLIGHTS = Counter(
    "vramdoc_preflights_total",
    "Pre-flights answered, by outcome (starts, rejected, refused, fails).",
    ["outcome"],
)
CALIBRATION_ERROR = Gauge(
    "vramdoc_calibration_error_gib",
    "The estimator's mean error (predicted - measured, GiB) on pasted vLLM profiles, by model family, "
    "GPU, vLLM minor and figure.",
    ["family", "gpu", "vllm_minor", "figure"],
)
CALIBRATION_SAMPLES = Gauge(
    "vramdoc_calibration_samples",
    "Pasted vLLM profiles the estimator was compared with, by model family, GPU and vLLM minor.",
    ["family", "gpu", "vllm_minor"],
)


def publish_calibration(groups: Sequence[CalibrationGroup]) -> None:
    """Set the calibration gauges to the groups' current errors (every worker reads the same Redis)."""
    for group in groups:
        labels = (group.family or "unknown", group.gpu, group.vllm_minor or "unknown")
        CALIBRATION_SAMPLES.labels(*labels).set(group.samples)
        for figure, error in group.figures.items():
            CALIBRATION_ERROR.labels(*labels, figure).set(error.mean_error_gib)


# Labelled children looked up once: endpoints x phases and outcomes are closed vocabularies.
@functools.lru_cache(maxsize=256)
def _diagnoses(endpoint: str, phase: str) -> Any:
    return DIAGNOSES.labels(endpoint, phase)


@functools.lru_cache(maxsize=64)
def _preflights(outcome: str) -> Any:
    return PREFLIGHTS.labels(outcome)


def count_diagnosis(endpoint: str, phase: str) -> None:
    """One more answer of `phase` from `endpoint`."""
    _diagnoses(endpoint, phase).inc()


def count_preflight(outcome: str) -> None:
    """One more pre-flight answered `outcome`."""
    _preflights(outcome).inc()


_KEPT_REQUEST_KEYS = ("method", "url")


def prometheus_config() -> PrometheusConfig:
    """Request counts and latency by route template, method and status (bounded label cardinality)."""
    return PrometheusConfig(
        app_name="vramdoc",
        prefix="vramdoc_http",
        group_path=True,
        exclude=["/metrics"],
        buckets=[0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
        middleware_class=RequestMetrics,
    )


class RequestMetrics(PrometheusMiddleware):
    """Litestar's Prometheus middleware (same metrics, names and labels), with each labelled child
    looked up once per route, method and status instead of four times on every request.

    The values are prometheus_client's: in-process with one worker; with several, `vramdoc serve`
    sets PROMETHEUS_MULTIPROC_DIR so each worker writes its own file and /metrics sums them all.
    """

    def __init__(self, app: ASGIApp, config: PrometheusConfig) -> None:
        super().__init__(app, config)
        if config.labels or config.exemplars or config.excluded_http_methods or not config.group_path:
            raise ValueError("RequestMetrics labels by route template only, with no extra labels")
        self._running: dict[tuple[str, str], Any] = {}
        self._finished: dict[tuple[str, str, int], tuple[Any, Any, Any]] = {}

    def _labels(self, method: str, path: str, status: int) -> dict[str, str | int | float]:
        return {"method": method, "path": path, "status_code": status, "app_name": self._config.app_name}

    def _in_progress(self, method: str, path: str) -> Any:
        child = self._running.get((method, path))
        if child is None:
            labels = self._labels(method, path, 200)
            child = self._running[(method, path)] = self.requests_in_progress(labels).labels(*labels.values())
        return child

    def _outcome(self, method: str, path: str, status: int) -> tuple[Any, Any, Any]:
        children = self._finished.get((method, path, status))
        if children is None:
            labels = self._labels(method, path, status)
            values = labels.values()
            errors = self.requests_error_count(labels).labels(*values) if status >= 500 else None
            children = (
                self.request_count(labels).labels(*values),
                self.request_time(labels).labels(*values),
                errors,
            )
            self._finished[(method, path, status)] = children
        return children

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"] if scope["type"] == ScopeType.HTTP else str(scope["type"])
        path = scope["path_template"]
        started = time.perf_counter()
        span = [200, 0.0]  # status, seconds to the last body message

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                span[0] = message["status"]
            elif message["type"] == "http.response.body":
                span[1] = time.perf_counter() - started
            await send(message)

        running = self._in_progress(method, path)
        running.inc()
        try:
            await self.app(scope, receive, timed_send)
        finally:
            running.dec()
            count, duration, errors = self._outcome(method, path, int(span[0]))
            if errors is not None:
                errors.inc()
            count.inc()
            duration.observe(span[1])


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
    return redact_value(value)


def _before_send(event: Any, _hint: Any) -> Any:
    request = event.get("request")
    if isinstance(request, dict):
        # Whatever added it, only the method and the URL without its query string are kept.
        kept = {key: request[key] for key in _KEPT_REQUEST_KEYS if key in request}
        if isinstance(kept.get("url"), str):
            kept["url"] = kept["url"].split("?", 1)[0]
        event["request"] = kept
    return scrub(event)


def _before_breadcrumb(crumb: Any, _hint: Any) -> Any:
    return scrub(crumb)


def init_sentry(dsn: str, environment: str | None = None) -> None:
    """Report unhandled errors to Sentry without request bodies, locals or unredacted text."""
    import sentry_sdk
    from sentry_sdk.integrations.dedupe import DedupeIntegration
    from sentry_sdk.integrations.logging import LoggingIntegration, ignore_logger

    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        default_integrations=False,
        auto_enabling_integrations=False,
        # Log records become breadcrumbs (scrubbed), never events: report_failure sends the one event.
        integrations=[DedupeIntegration(), LoggingIntegration(level=logging.INFO, event_level=None)],
        send_default_pii=False,
        include_local_variables=False,
        max_request_body_size="never",
        before_send=_before_send,
        before_breadcrumb=_before_breadcrumb,
        traces_sample_rate=0.0,
    )
    ignore_logger("uvicorn.access")  # request lines hold query strings: not even as breadcrumbs


class RedactedAccessLog(logging.Filter):
    """uvicorn's access log line with the query string redacted (`?command=… --hf-token hf_…`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_value(arg) if isinstance(arg, str) else arg for arg in record.args)
        return True


def access_log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration, with the access log passed through RedactedAccessLog."""
    config: dict[str, Any] = {**LOGGING_CONFIG, "filters": {"redacted": {"()": RedactedAccessLog}}}
    config["handlers"] = {name: dict(handler) for name, handler in LOGGING_CONFIG["handlers"].items()}
    config["handlers"]["access"]["filters"] = ["redacted"]
    return config


def _sentry() -> Any | None:
    """sentry_sdk once something imported it (init_sentry does); before that no client can exist."""
    return sys.modules.get("sentry_sdk")


def report_failure(exc: BaseException, method: str, path: str) -> None:
    """One Sentry event for a request that failed inside the service (a no-op without a DSN)."""
    sentry_sdk = _sentry()
    if sentry_sdk is None:
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_context("request", {"method": method, "path": path})
        scope.set_tag("http.method", method)
        scope.set_tag("http.path", path)
        sentry_sdk.capture_exception(exc)


def note_problem(status: int, kind: str, method: str, path: str) -> None:
    """A client error is not a failure of the service: at most a breadcrumb for a later event."""
    sentry_sdk = _sentry()
    if sentry_sdk is None:
        return
    sentry_sdk.add_breadcrumb(
        category="http", level="info", message=f"{method} {path} answered {status} ({kind})"
    )
