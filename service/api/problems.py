"""One place that turns every error into an RFC 9457 `application/problem+json` response.

Litestar's own exceptions carry their message in `detail` and a generic title; domain errors
(`InputError` and its kinds) carry a full sentence. Each kind gets its own `type` URI so a client can
branch on it, a short `title`, and a one-sentence `detail`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_422_UNPROCESSABLE_ENTITY,
    HTTP_500_INTERNAL_SERVER_ERROR,
)
from litestar.types import ExceptionHandlersMap

from service.api.monitoring import note_problem, report_failure
from service.errors import InputError, UnknownGpuError, UnknownModelError

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "FieldError",
    "Problem",
    "ProblemError",
    "decode_error",
    "exception_handlers",
    "problem_type",
]

PROBLEM_MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("vramdoc.service")

_STATUS_KINDS = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Missing or wrong API token"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    406: ("not-acceptable", "Not acceptable"),
    408: ("body-timeout", "Request body timed out"),
    413: ("body-too-large", "Request body too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
    422: ("invalid-input", "Invalid input"),
    429: ("rate-limited", "Too many requests"),
    500: ("internal-error", "Internal error"),
    503: ("unavailable", "Service unavailable"),
}
_INPUT_TITLES = {
    "empty-log": "Empty log",
    "binary-log": "Not a text log",
    "unknown-model": "Unknown model",
    "unknown-gpu": "Unknown GPU",
    "invalid-config": "Invalid configuration",
    "model-access": "Model not accessible",
    "model-unavailable": "Model not reachable",
    "invalid-input": "Invalid input",
}


def problem_type(slug: str) -> str:
    """The absolute URI naming one kind of problem."""
    return f"urn:vramdoc:problem:{slug}"


class FieldError(msgspec.Struct, frozen=True):
    field: str
    message: str


class Problem(msgspec.Struct, frozen=True, omit_defaults=True):
    """RFC 9457 problem details; `errors` names each bad field, `suggestions` the closest known names."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldError] = msgspec.field(default_factory=list)
    suggestions: list[str] = msgspec.field(default_factory=list)


class ProblemError(HTTPException):
    """Raised by routes for a problem that is not a domain error (bad query value, bad JSON body)."""

    def __init__(
        self, status: int, slug: str, title: str, detail: str, errors: list[FieldError] | None = None
    ):
        super().__init__(detail=detail, status_code=status)
        self.slug = slug
        self.title = title
        self.errors = errors or []


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "?", "!")) else f"{text}."


def _response(problem: Problem, headers: dict[str, str] | None = None) -> Response[Problem]:
    return Response(problem, status_code=problem.status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def _field_errors(extra: Any) -> list[FieldError]:
    """Litestar's validation `extra` is a list of {message, key, source}; body fields as `$.path`."""
    if not isinstance(extra, list):
        return []
    errors = []
    for item in extra:
        if isinstance(item, dict) and item.get("message"):
            source = str(getattr(item.get("source"), "value", item.get("source")) or "body")
            key = str(item.get("key") or "")
            if source == "body":
                field = key if key.startswith("$") else f"$.{key}" if key else "$"
            else:
                field = f"{source}.{key}"
            errors.append(FieldError(field, str(item["message"])))
    return errors


def _field_sentence(error: FieldError) -> str:
    where, _, name = error.field.partition(".")
    if where == "$":
        return _sentence(f"The body field {error.field} is invalid: {error.message}")
    return _sentence(f"The {where} parameter `{name}` is invalid: {error.message}")


def _http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Problem]:
    status = exc.status_code
    slug, title = _STATUS_KINDS.get(status, ("http-error", "Request failed"))
    errors: list[FieldError] = []
    detail = _sentence(exc.detail) if exc.detail else f"{title}."
    if isinstance(exc, ProblemError):
        slug, title, errors = exc.slug, exc.title, exc.errors
    elif isinstance(exc, ValidationException):
        slug, title = "validation-error", "Invalid request"
        errors = _field_errors(exc.extra)
        if errors:
            detail = _field_sentence(errors[0])
    elif isinstance(exc.__cause__, SerializationException):
        slug, title = "invalid-json", "Invalid JSON"
        detail = _sentence(f"The body is not valid JSON ({exc.detail})")
    elif status == 413:
        detail = (
            "The request body is larger than this service accepts; send a shorter log (the tail is enough)."
        )
    elif status == 405:
        detail = _sentence(f"{exc.detail}; see /schema for the methods each path accepts")
    elif status == 404:
        detail = "No such endpoint; see /schema for the list of endpoints."
    note_problem(status, slug, request.method, request.url.path)
    return _response(Problem(problem_type(slug), title, status, detail, errors), exc.headers)


def _input_detail(exc: InputError) -> str:
    """One sentence; for unknown names the candidates go in `suggestions` rather than the prose."""
    if isinstance(exc, UnknownModelError):
        hint = "try one of the `suggestions`, or " if exc.suggestions else ""
        return f"The model {exc.model!r} is not in {exc.searched}; {hint}send its Hugging Face config.json."
    if isinstance(exc, UnknownGpuError):
        hint = "try one of the `suggestions`, or " if exc.suggestions else ""
        return (
            f"The GPU {exc.gpu!r} is not in the catalog; {hint}give its memory as `gpu_total_gib` (e.g. 80)."
        )
    return _sentence(str(exc))


def _input_error(request: Request[Any, Any, Any], exc: InputError) -> Response[Problem]:
    slug = exc.problem_type
    note_problem(HTTP_422_UNPROCESSABLE_ENTITY, slug, request.method, request.url.path)
    suggestions = exc.suggestions if isinstance(exc, UnknownModelError | UnknownGpuError) else []
    title = _INPUT_TITLES.get(slug, "Invalid input")
    problem = Problem(
        problem_type(slug), title, HTTP_422_UNPROCESSABLE_ENTITY, _input_detail(exc), suggestions=suggestions
    )
    return _response(problem)


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    log.error("Unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    report_failure(exc, request.method, request.url.path)
    detail = "The service failed on this request; the error is logged, and retrying will not help."
    return _response(
        Problem(problem_type("internal-error"), "Internal error", HTTP_500_INTERNAL_SERVER_ERROR, detail)
    )


exception_handlers: ExceptionHandlersMap = {
    HTTPException: _http_exception,
    InputError: _input_error,
    Exception: _internal_error,
}

_JSON_PATH = re.compile(r" - at `(\$[^`]*)`$")


def decode_error(exc: msgspec.DecodeError) -> ProblemError:
    """A body that is not valid JSON, or has a bad field: name the field by its `$.path`."""
    message = str(exc)
    match = _JSON_PATH.search(message)
    if isinstance(exc, msgspec.ValidationError):
        field = match.group(1) if match else "$"
        reason = message[: match.start()] if match else message
        return ProblemError(
            HTTP_400_BAD_REQUEST,
            "validation-error",
            "Invalid request",
            _sentence(f"The body field {field} is invalid: {reason}"),
            [FieldError(field, reason)],
        )
    return ProblemError(
        HTTP_400_BAD_REQUEST,
        "invalid-json",
        "Invalid JSON",
        _sentence(f"The body is not valid JSON ({message})"),
        [],
    )
