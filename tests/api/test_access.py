"""Bearer tokens and per-client rate limits, in memory and shared through a real Redis."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from service.api.settings import RateLimit, Settings

ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]
ServerFactory = Callable[[Settings], httpx.Client]
LOG = "INFO 11-20 09:14:02 [api_server.py:1896] vLLM API server version 0.32.0\n"


def test_tokens_guard_v1_but_not_health(serve: ServerFactory, problem: ProblemCheck) -> None:
    api = serve(Settings(rate_limit=None, api_tokens=("alpha-token", "beta-token")))
    missing = api.post("/v1/classify", content=LOG)
    problem(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = api.post("/v1/classify", content=LOG, headers={"authorization": "Bearer alpha-tokenX"})
    problem(wrong, 401, "unauthorized")
    problem(
        api.post("/v1/classify", content=LOG, headers={"authorization": "Basic alpha-token"}),
        401,
        "unauthorized",
    )
    for token in ("alpha-token", "beta-token"):
        ok = api.post("/v1/classify", content=LOG, headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200, ok.text
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").status_code == 200
    assert api.get("/metrics").status_code == 200


def test_rate_limit_answers_429_with_retry_after(serve: ServerFactory, problem: ProblemCheck) -> None:
    api = serve(Settings(rate_limit=RateLimit(3, 3600)))
    assert [api.get("/v1/gpus").status_code for _ in range(3)] == [200, 200, 200]
    refused = api.get("/v1/gpus")
    problem(refused, 429, "rate-limited")
    assert 0 < int(refused.headers["retry-after"]) <= 3600
    assert api.get("/healthz").status_code == 200


def test_a_refused_request_is_answered_before_its_body_or_parameters_are_read(
    serve: ServerFactory, problem: ProblemCheck
) -> None:
    api = serve(Settings(rate_limit=RateLimit(1, 3600), api_tokens=("alpha-token",), max_body_bytes=1024))
    oversized, bad_hint = "x" * 4096, {"top": "not-a-number"}
    problem(api.post("/v1/diagnose", content=oversized, params=bad_hint), 401, "unauthorized")
    problem(api.post("/v1/diagnose", content=oversized, params=bad_hint), 429, "rate-limited")


def test_rate_limit_is_per_token_when_tokens_are_set(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=RateLimit(2, 3600), api_tokens=("alpha-token", "beta-token")))
    alpha = {"authorization": "Bearer alpha-token"}
    beta = {"authorization": "Bearer beta-token"}
    assert [api.get("/v1/gpus", headers=alpha).status_code for _ in range(3)] == [200, 200, 429]
    assert api.get("/v1/gpus", headers=beta).status_code == 200


def test_rate_limit_is_shared_by_servers_on_one_redis(
    serve: ServerFactory, redis_url: str, key_prefix: str
) -> None:
    settings = Settings(rate_limit=RateLimit(4, 3600), redis_url=redis_url, redis_prefix=key_prefix)
    first, second = serve(settings), serve(settings)
    codes = [server.get("/v1/gpus").status_code for server in (first, second, first, second, first, second)]
    assert codes == [200, 200, 200, 200, 429, 429]


def test_redis_down_still_diagnoses_and_readyz_reports_it(
    serve: ServerFactory, unused_redis_url: str
) -> None:
    api = serve(Settings(rate_limit=RateLimit(100, 60), redis_url=unused_redis_url))
    response = api.post("/v1/diagnose", content=LOG)
    assert response.status_code == 200, response.text
    ready = api.get("/readyz").json()
    assert ready["status"] == "degraded"
    assert ready["redis"].startswith("unreachable")


class SteppedClock:
    """Wall-clock seconds the test sets by hand, so a window boundary is crossed without sleeping."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_rate_limit_windows_roll_over_on_the_clock(
    serve_on_clock: Callable[[Settings, Callable[[], float]], httpx.Client], problem: ProblemCheck
) -> None:
    clock = SteppedClock(120.0)
    api = serve_on_clock(Settings(rate_limit=RateLimit(2, 60)), clock)
    assert [api.get("/v1/gpus").status_code for _ in range(2)] == [200, 200]
    refused = api.get("/v1/gpus")
    problem(refused, 429, "rate-limited")
    assert refused.headers["retry-after"] == "60"
    clock.now = 150.5
    assert api.get("/v1/gpus").headers["retry-after"] == "30"
    clock.now = 180.0  # the next window: a fresh count
    assert api.get("/v1/gpus").status_code == 200
