"""A request body that stops arriving is answered 408, instead of holding the connection forever.

uvicorn bounds the headers and idle keep-alive connections, but not the body: a client that
declares a Content-Length (or opens a chunked upload) and then sends nothing more would wait as
long as it likes. The wait is bounded per message, so a slow but steady upload still gets through.
"""

from __future__ import annotations

import anyio
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

from service.api.problems import ProblemError

__all__ = ["StalledBodyGuard"]


class StalledBodyGuard:
    """ASGI middleware: each body message must arrive within `timeout_s` of the previous one."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        body_done = False

        async def guarded() -> ReceiveMessage:
            nonlocal body_done
            if body_done:  # after the body, receive() only waits for a disconnect: never bounded
                return await receive()
            with anyio.move_on_after(self.timeout_s) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise ProblemError(
                    408,
                    "body-timeout",
                    "Request body timed out",
                    f"The request body stopped arriving for {self.timeout_s:g} s; send it in one go.",
                )
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, guarded, send)
