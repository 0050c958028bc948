"""The bench-only trivial POST endpoint: absent by default, behind the same /v1 guards when enabled."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from service.api.bench_route import BENCH_TRIVIAL_POST_ENV
from service.api.settings import Settings

ServerFactory = Callable[[Settings], httpx.Client]


def test_absent_unless_the_bench_variable_is_set(
    serve: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BENCH_TRIVIAL_POST_ENV, raising=False)
    api = serve(Settings(rate_limit=None))
    assert api.post("/v1/bench/trivial", content=b"x" * 100).status_code == 404
    assert "/v1/bench/trivial" not in api.get("/schema/openapi.json").text


def test_reads_the_body_behind_the_v1_guards(serve: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BENCH_TRIVIAL_POST_ENV, "1")
    api = serve(Settings(rate_limit=None, api_tokens=("bench-token",)))
    assert api.post("/v1/bench/trivial", content=b"x" * 37_000).status_code == 401
    answer = api.post(
        "/v1/bench/trivial", content=b"x" * 37_000, headers={"Authorization": "Bearer bench-token"}
    )
    assert answer.status_code == 200
    assert answer.json() == {"received": 37_000}
