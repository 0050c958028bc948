"""Who may call the `/v1` endpoints, and how often: bearer tokens and per-client rate limits.

`admit` runs both as the `/v1` router's `before_request` hook: after routing, before any parameter
or body is read, so a refused request costs one counter increment and no parsing. Not as Litestar
guards: each guard copies the route handler on every request (and a plain-function guard runs on
a worker thread), which is most of what a guard costs; the hook is one coroutine call.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from litestar.connection import ASGIConnection, Request
from litestar.exceptions import NotAuthorizedException, TooManyRequestsException

from service.api.settings import Settings
from service.api.views import Loaded, loaded

__all__ = ["admit", "client_identity", "rate_limit", "require_token"]


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    scheme, _, token = connection.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def _token_matches(token: str, tokens: tuple[str, ...]) -> bool:
    """Compare with every configured token in constant time, so timing reveals neither which nor how much."""
    given = token.encode()
    matched = False
    for known in tokens:
        matched |= hmac.compare_digest(given, known.encode())
    return matched


def client_identity(connection: ASGIConnection[Any, Any, Any, Any], settings: Settings) -> str:
    """The rate-limit key: the API token (hashed) when it is valid, else the client address."""
    token = _bearer(connection)
    if settings.api_tokens and token is not None and _token_matches(token, settings.api_tokens):
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:24]
    return "ip:" + (connection.client.host if connection.client else "unknown")


async def rate_limit(connection: ASGIConnection[Any, Any, Any, Any], ready: Loaded) -> None:
    """Allow `settings.rate_limit` requests per client in each fixed window; 429 with Retry-After past it."""
    settings, limit = ready.settings, ready.settings.rate_limit
    if limit is None:
        return
    now = ready.clock()
    window = int(now // limit.window_s)
    count = await ready.shared.hit(f"{client_identity(connection, settings)}:{window}", limit.window_s)
    if count > limit.requests:
        retry_after = max(1, int((window + 1) * limit.window_s - now + 0.999))
        raise TooManyRequestsException(
            detail=(
                f"This client sent more than {limit.requests} requests in {limit.window_s} s; "
                f"retry after {retry_after} s."
            ),
            headers={"Retry-After": str(retry_after)},
        )


def require_token(connection: ASGIConnection[Any, Any, Any, Any], settings: Settings) -> None:
    """When `VRAMDOC_API_TOKENS` is set, require `Authorization: Bearer <one of them>`."""
    if not settings.api_tokens:
        return
    token = _bearer(connection)
    if token is None or not _token_matches(token, settings.api_tokens):
        raise NotAuthorizedException(
            detail="Send one of this service's API tokens as `Authorization: Bearer <token>`.",
            headers={"WWW-Authenticate": 'Bearer realm="vramdoc"'},
        )


async def admit(request: Request[Any, Any, Any]) -> None:
    """Count the request against its client's rate limit, then check its token (429 before 401)."""
    ready = loaded(request.app.state)
    await rate_limit(request, ready)
    require_token(request, ready.settings)
