"""A trivial POST endpoint that exists only when `VRAMDOC_BENCH_TRIVIAL_POST=1`, for bench/service.py.

It is the peer `/v1/diagnose` is measured against: mounted on the same `/v1` router (so the same
rate-limit and token checks, middleware, body-size limit and worker count apply), it reads the whole
body and answers a small JSON object, doing no diagnosis. Production never sets the variable.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from litestar import Request, post

__all__ = ["BENCH_TRIVIAL_POST_ENV", "bench_handlers"]

BENCH_TRIVIAL_POST_ENV = "VRAMDOC_BENCH_TRIVIAL_POST"


class Received(msgspec.Struct, frozen=True):
    """How many body bytes the trivial endpoint read."""

    received: int


@post("/bench/trivial", status_code=200, include_in_schema=False)
async def bench_trivial(request: Request[Any, Any, Any]) -> Received:
    return Received(len(await request.body()))


def bench_handlers() -> list[Any]:
    """The bench-only handlers when the bench variable is `1` in this process, else none."""
    return [bench_trivial] if os.environ.get(BENCH_TRIVIAL_POST_ENV, "").strip() == "1" else []
