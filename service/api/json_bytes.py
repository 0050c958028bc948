"""A response of JSON bytes already encoded (a stored or just-encoded answer), sent as they are.

Litestar's `Response` renders its content and builds an `ASGIResponse` (a mutable header
collection, each header added and encoded one by one): about 10 µs a request, a seventh of what a
whole trivial POST costs, for bytes that need no rendering and headers that never vary. A
`JsonBytes` is a `Response` (so a handler or a `before_request` hook returns it as any other) whose
ASGI form is the two messages `Response.to_asgi_response` would send for the same content, built
directly; when the route adds anything of its own (headers, cookies, a background task, another
status or media type), it is Litestar's own response after all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from litestar import MediaType, Request, Response
from litestar.background_tasks import BackgroundTask, BackgroundTasks
from litestar.datastructures import Cookie
from litestar.types import Receive, Scope, Send, TypeEncodersMap

__all__ = ["JsonBytes"]

_JSON = MediaType.JSON.value.encode("latin-1")


class _Sent:
    """The ASGI app of one `JsonBytes`: the start message and the whole body, nothing after."""

    __slots__ = ("_body", "_start")

    def __init__(self, start: dict[str, Any], body: dict[str, Any]) -> None:
        self._start, self._body = start, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(self._start)  # type: ignore[arg-type]
        await send(self._body)  # type: ignore[arg-type]


class JsonBytes(Response[bytes]):
    """`Response(body, media_type=JSON, headers={"X-Cache": cache})`, sent without re-rendering."""

    __slots__ = ()

    def __init__(self, body: bytes, cache: str) -> None:
        # What Response.__init__ sets for these arguments, without its type checks and copies.
        self.content = body
        self.background = None
        self.cookies: list[Cookie] = []
        self.encoding = "utf-8"
        self.headers: dict[str, Any] = {"X-Cache": cache}
        self.media_type = MediaType.JSON
        self.status_code = None
        self.response_type_encoders = {}

    def to_asgi_response(
        self,
        app: Any,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        headers: dict[str, str] | None = None,
        status_code: int | None = None,
        media_type: MediaType | str | None = None,
        type_encoders: TypeEncodersMap | None = None,
        **rest: Any,
    ) -> Any:
        cookie_list = list(cookies or ())
        if (
            headers
            or background is not None
            or any(not cookie.documentation_only for cookie in cookie_list)
            or rest.get("is_head_response")
            or rest.get("encoded_headers")
            or status_code not in (None, 200)
        ):  # (the media type given is the handler's; Response's own, JSON here, takes precedence)
            return super().to_asgi_response(
                app,
                request,
                background=background,
                cookies=cookie_list,
                headers=headers,
                status_code=status_code,
                media_type=media_type,
                type_encoders=type_encoders,
                **rest,
            )
        body = self.content
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"x-cache", self.headers["X-Cache"].encode("latin-1")),
                (b"content-type", _JSON),
                (b"content-length", b"%d" % len(body)),
            ],
        }
        return _Sent(start, {"type": "http.response.body", "body": body, "more_body": False})
