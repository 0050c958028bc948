"""What every vramdoc HTTP server (service, bot gateway, agent) does about slow or stalled clients.

uvicorn bounds idle keep-alive connections, but not a connection that opens and then sends its
headers slowly or never finishes them, and not a body that stops arriving: each would hold a
connection forever. `HeaderDeadlineProtocol` closes a connection whose request headers are not
complete within HEADER_TIMEOUT_S of its first byte (or of the connection); `StalledBodyGuard`
answers 408 when a body message does not arrive within its timeout of the previous one, so a slow
but steady upload still gets through. The guard costs a request without a body nothing, and one
asyncio timer handle per body message otherwise (the servers run on asyncio: uvicorn's loop).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from typing import Any

from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "HEADER_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "HeaderDeadlineProtocol",
    "StalledBodyGuard",
    "return_large_blocks",
    "server_options",
    "trim_freed_memory",
]

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5


# glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so after the first
# 2 MB paste later ones come from the heap, which it keeps; and each thread that diagnoses a large
# log gets an arena of its own, kept as well: a burst of 16 pastes left a worker 100-200 MiB larger.
# A fixed threshold keeps large blocks mmap-ed (freeing one returns it), the heap is trimmed at the
# same size, and threads share one arena (they take turns under the GIL anyway).
MMAP_THRESHOLD_BYTES = 128 * 1024
MALLOC_ARENAS = 1
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return None


_LIBC = _libc()


def return_large_blocks() -> None:
    """Have the C allocator give large freed blocks back to the system (glibc; elsewhere a no-op)."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES)
        mallopt(_M_ARENA_MAX, MALLOC_ARENAS)


def trim_freed_memory() -> None:
    """Return the free pages inside the C heap to the system (after a large log; glibc only): the
    request bodies arrive in chunks too small to be mmap-ed, and their free pages stay otherwise."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose headers do not arrive in time."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._arm()

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_headers():
            self._arm()
        super().data_received(data)
        if not self._waiting_for_headers():
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm()  # the keep-alive timer takes over until the next request's first byte

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def server_options() -> dict[str, Any]:
    """The uvicorn settings every vramdoc server runs with."""
    return {"http": HeaderDeadlineProtocol, "timeout_keep_alive": KEEP_ALIVE_S}


class StalledBodyGuard:
    """ASGI middleware: each body message must arrive within `timeout_s` of the previous one."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        body_done = False
        loop = asyncio.get_running_loop()

        async def guarded() -> ReceiveMessage:
            nonlocal body_done
            if body_done:  # after the body, receive() only waits for a disconnect: never bounded
                return await receive()
            message = await _within(loop, self.timeout_s, receive)
            if message is None:
                raise HTTPException(
                    status_code=408,
                    detail=f"The request body stopped arriving for {self.timeout_s:g} s; send it in one go.",
                )
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, guarded, send)


async def _within(loop: asyncio.AbstractEventLoop, seconds: float, receive: Receive) -> ReceiveMessage | None:
    """`await receive()`, or None when it takes longer than `seconds`.

    One timer handle, cancelled when the message arrives: a third of what `asyncio.timeout` costs
    (its context object and rescheduling), and it runs once per body message of every request.
    """
    task = asyncio.current_task()
    assert task is not None
    late = False

    def stall() -> None:
        nonlocal late
        late = True
        task.cancel()

    timer = loop.call_later(seconds, stall)
    try:
        return await receive()
    except asyncio.CancelledError:
        if late and task.uncancel() == 0:
            return None
        raise
    finally:
        timer.cancel()


def _has_body(scope: Scope) -> bool:
    """Whether the request announces a body (HTTP/1.1: a non-zero Content-Length, or chunked)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False
