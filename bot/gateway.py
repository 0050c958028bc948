"""The Events API over HTTP: one native Litestar route in front of bolt.

Litestar reads the body (enforcing its size limit, 413 above it); the Slack signature and its
5-minute window are checked on the raw bytes before anything parses them, so a forged or stale
request gets 401 and a malformed one 400 — never a 500 from bolt's JSON parsing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl

from litestar import Litestar, Request, Response, get, post
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest

__all__ = ["MAX_SKEW_S", "create_gateway", "decode_body", "sign", "verify_signature"]

MAX_SKEW_S = 300


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's v0 signature of a request body."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify_signature(
    secret: str, body: bytes, timestamp: str | None, signature: str | None, *, now: float
) -> bool:
    """True only for a correct signature on a timestamp within five minutes of `now`."""
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    if abs(now - int(timestamp)) > MAX_SKEW_S:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def decode_body(body: bytes, content_type: str | None) -> str | None:
    """The body as text when bolt can parse it into an object; None when it is malformed."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        if (content_type or "").startswith("application/json") or text.startswith("{"):
            parsed: Any = json.loads(text)
        else:
            form = dict(parse_qsl(text, keep_blank_values=True))
            parsed = json.loads(form["payload"]) if "payload" in form else form
    except ValueError:
        return None
    return text if isinstance(parsed, dict) and parsed else None


def create_gateway(
    app: AsyncApp,
    *,
    signing_secret: str,
    max_body_bytes: int,
    clock: Callable[[], float] = time.time,
    on_shutdown: list[Callable[[], Any]] | None = None,
) -> Litestar:
    """Litestar app serving `POST /slack/events` (events, slash commands, interactivity) and `/healthz`."""

    @post("/slack/events", status_code=200)
    async def slack_events(request: Request[Any, Any, Any]) -> Response[bytes]:
        body = await request.body()
        headers = request.headers
        if not verify_signature(
            signing_secret,
            body,
            headers.get("x-slack-request-timestamp"),
            headers.get("x-slack-signature"),
            now=clock(),
        ):
            return Response(b"invalid or stale Slack signature", status_code=401, media_type="text/plain")
        text = decode_body(body, headers.get("content-type"))
        if text is None:
            return Response(b"malformed Slack request body", status_code=400, media_type="text/plain")
        query: dict[str, Sequence[str]] = {
            key: request.query_params.getall(key) for key in request.query_params
        }
        bolt_request = AsyncBoltRequest(
            body=text,
            query=query,
            headers={key: value for key, value in headers.items()},
        )
        reply = await app.async_dispatch(bolt_request)
        content = reply.body.encode() if isinstance(reply.body, str) else bytes(reply.body or b"")
        reply_headers = dict(reply.first_headers_without_set_cookie())
        media_type = reply_headers.pop("content-type", "text/plain; charset=utf-8")
        return Response(content, status_code=reply.status, headers=reply_headers, media_type=media_type)

    @get("/healthz", media_type="text/plain")
    async def healthz() -> str:
        return "ok"

    return Litestar(
        route_handlers=[slack_events, healthz],
        request_max_body_size=max_body_bytes,
        on_shutdown=on_shutdown or [],
        logging_config=None,  # `vramdoc bot` configures logging; Litestar's default would replace it
    )
