"""The Events API over HTTP: one native Litestar route in front of bolt.

Litestar reads the body (enforcing its size limit, 413 above it); the Slack signature and its
5-minute window are checked once, here, on the raw bytes with slack_sdk's SignatureVerifier, before
anything parses them (bolt's own check is off), so a forged or stale request gets 401 and a
malformed one a logged 400, never a 500 from bolt's JSON parsing. A signed request replayed within
the window (same timestamp and body) is acknowledged and dropped: a slash command or a button press
is answered once. Slack's own retries carry a new timestamp and are de-duplicated by event id.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl

from litestar import Litestar, Request, Response, get, post
from litestar.middleware import DefineMiddleware
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import Clock, SignatureVerifier

from service.serving import StalledBodyGuard

__all__ = ["MAX_SKEW_S", "create_gateway", "decode_body", "verify_signature"]

log = logging.getLogger(__name__)

# Slack's window, which SignatureVerifier enforces; a replay is remembered this long.
MAX_SKEW_S = 300
# A Slack request is small and sent in one go; a body that stops arriving for this long is dropped.
BODY_TIMEOUT_S = 10.0


class _Clock(Clock):
    """SignatureVerifier's clock, from the gateway's injected one (tests move time)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


def verify_signature(
    verifier: SignatureVerifier, body: bytes, timestamp: str | None, signature: str | None
) -> bool:
    """True only for a correct signature on a timestamp within five minutes of the verifier's clock.

    SignatureVerifier raises on a timestamp that is not a number or a body that is not UTF-8
    (Slack sends neither); those are refused here first.
    """
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return verifier.is_valid(body=text, timestamp=timestamp, signature=signature)


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
    except (ValueError, RecursionError):
        return None
    return text if isinstance(parsed, dict) and parsed else None


def create_gateway(
    app: AsyncApp,
    *,
    signing_secret: str,
    max_body_bytes: int,
    clock: Callable[[], float] = time.time,
    claim: Callable[[str], Awaitable[bool]] | None = None,
    body_timeout_s: float = BODY_TIMEOUT_S,
    on_shutdown: list[Callable[[], Any]] | None = None,
) -> Litestar:
    """Litestar app serving `POST /slack/events` (events, slash commands, interactivity) and `/healthz`.

    `claim` is the bot state's once-only claim (True the first time a key is seen); without it
    replays are not detected.
    """
    verifier = SignatureVerifier(signing_secret, clock=_Clock(clock))

    @post("/slack/events", status_code=200)
    async def slack_events(request: Request[Any, Any, Any]) -> Response[bytes]:
        body = await request.body()
        headers = request.headers
        timestamp = headers.get("x-slack-request-timestamp")
        if not verify_signature(verifier, body, timestamp, headers.get("x-slack-signature")):
            return Response(b"invalid or stale Slack signature", status_code=401, media_type="text/plain")
        text = decode_body(body, headers.get("content-type"))
        if text is None:
            log.warning("a signed Slack request with a malformed body (%d bytes) was answered 400", len(body))
            return Response(b"malformed Slack request body", status_code=400, media_type="text/plain")
        digest = hashlib.sha256(f"{timestamp}:".encode() + body).hexdigest()
        if claim is not None and not await claim(f"replay:{digest}"):
            log.warning("a signed Slack request was replayed within its window; acknowledged, not answered")
            return Response(b"", status_code=200, media_type="text/plain")
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
        middleware=[DefineMiddleware(StalledBodyGuard, timeout_s=body_timeout_s)],
        request_max_body_size=max_body_bytes,
        on_shutdown=on_shutdown or [],
        logging_config=None,  # `vramdoc bot` configures logging; Litestar's default would replace it
    )
