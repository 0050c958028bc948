"""A repeat of an answered log request is a hit before its parameters are parsed, over real HTTP,
with every guard, header, metric and problem of the full path."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from litestar import MediaType, Response
from litestar.datastructures import Cookie

from service.api import routes
from service.api.hits import HitIndex, raw_key
from service.api.json_bytes import JsonBytes
from service.api.settings import RateLimit, Settings

ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]
ServerFactory = Callable[[Settings], httpx.Client]
KV_LOG = (Path(__file__).parent / "data" / "kv-capacity-v0.32-qwen.log").read_text()
HINTS = {"model": "Qwen/Qwen2.5-0.5B-Instruct"}


@pytest.fixture
def handler_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The endpoints whose handler body ran (the full path), one entry per request."""
    runs: list[str] = []
    full_path = routes._answer_log

    async def counted(request: Any, state: Any, endpoint: str, *args: Any, **kwargs: Any) -> Any:
        runs.append(endpoint)
        return await full_path(request, state, endpoint, *args, **kwargs)

    monkeypatch.setattr(routes, "_answer_log", counted)
    yield runs


def _sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one sample of /metrics (0 when absent)."""
    for line in metrics.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _counts(api: httpx.Client) -> tuple[float, float]:
    text = api.get("/metrics").text
    diagnoses = _sample(text, "vramdoc_diagnoses_total", endpoint="diagnose", phase="kv_cache_capacity")
    requests = _sample(
        text, "vramdoc_http_requests_total", method="POST", path="/v1/diagnose", status_code="200"
    )
    return diagnoses, requests


def _head(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k not in {"date", "server"}}  # uvicorn's


def test_a_repeat_is_answered_before_the_handler_with_the_same_bytes_headers_and_metrics(
    serve: ServerFactory, handler_runs: list[str]
) -> None:
    api = serve(Settings(rate_limit=None))
    first = api.post("/v1/diagnose", content=KV_LOG, params=HINTS)
    as_json = api.post("/v1/diagnose", json={"log": KV_LOG, **HINTS})  # the canonical entry's hit
    assert handler_runs == ["diagnose", "diagnose"]
    before = _counts(api)
    repeat = api.post("/v1/diagnose", content=KV_LOG, params=HINTS)
    assert handler_runs == ["diagnose", "diagnose"]  # answered by the before_request hook
    assert _counts(api) == (before[0] + 1, before[1] + 1)
    assert (first.headers["x-cache"], as_json.headers["x-cache"], repeat.headers["x-cache"]) == (
        "miss",
        "hit",
        "hit",
    )
    assert repeat.content == as_json.content == first.content
    assert _head(repeat) == _head(as_json)
    assert set(_head(repeat)) == {"x-cache", "content-type", "content-length"}
    assert repeat.headers["content-type"] == "application/json"


def test_a_json_repeat_and_a_classify_repeat_are_hits_of_their_own_endpoint(
    serve: ServerFactory, handler_runs: list[str]
) -> None:
    api = serve(Settings(rate_limit=None))
    body = {"log": KV_LOG, "top": 1}
    diagnosed = [api.post("/v1/diagnose", json=body) for _ in range(2)]
    classified = [api.post("/v1/classify", json=body) for _ in range(2)]
    assert handler_runs == ["diagnose", "classify"]
    assert [r.headers["x-cache"] for r in diagnosed + classified] == ["miss", "hit", "miss", "hit"]
    assert diagnosed[1].content == diagnosed[0].content != classified[0].content == classified[1].content


def test_the_same_bytes_in_another_content_type_are_another_request(
    serve: ServerFactory, handler_runs: list[str]
) -> None:
    api = serve(Settings(rate_limit=None))
    body = json.dumps({"log": KV_LOG, "top": 1}).encode()
    types = ("application/json", "text/plain", "application/json", "text/plain")
    answers = [api.post("/v1/diagnose", content=body, headers={"content-type": t}) for t in types]
    assert handler_runs == ["diagnose", "diagnose"]
    assert [r.headers["x-cache"] for r in answers] == ["miss", "miss", "hit", "hit"]
    assert len(answers[0].json()["fixes"]) == 1 and answers[1].json() != answers[0].json()
    assert answers[2].content == answers[0].content and answers[3].content == answers[1].content


def test_a_body_that_is_not_valid_json_is_refused_every_time(
    serve: ServerFactory, handler_runs: list[str], problem: ProblemCheck
) -> None:
    api = serve(Settings(rate_limit=None))
    for _ in range(2):
        refused = api.post("/v1/diagnose", content=b'{"log": ', headers={"content-type": "application/json"})
        problem(refused, 400, "invalid-json")
    assert handler_runs == ["diagnose", "diagnose"]


def test_a_repeat_needs_the_token_like_any_request(
    serve: ServerFactory, handler_runs: list[str], problem: ProblemCheck
) -> None:
    api = serve(Settings(rate_limit=None, api_tokens=("alpha-token",)))
    token = {"authorization": "Bearer alpha-token"}
    assert [api.post("/v1/diagnose", content=KV_LOG, headers=token).headers["x-cache"] for _ in range(2)] == [
        "miss",
        "hit",
    ]
    missing = api.post("/v1/diagnose", content=KV_LOG)
    problem(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = api.post("/v1/diagnose", content=KV_LOG, headers={"authorization": "Bearer alpha-tokenX"})
    problem(wrong, 401, "unauthorized")
    assert handler_runs == ["diagnose"]


def test_a_repeat_counts_against_the_rate_limit(serve: ServerFactory, problem: ProblemCheck) -> None:
    api = serve(Settings(rate_limit=RateLimit(2, 3600)))
    answered = [api.post("/v1/classify", content=KV_LOG) for _ in range(2)]
    assert [r.headers["x-cache"] for r in answered] == ["miss", "hit"]
    refused = api.post("/v1/classify", content=KV_LOG)
    problem(refused, 429, "rate-limited")
    assert 0 < int(refused.headers["retry-after"]) <= 3600


def test_a_body_over_the_limit_is_refused_413_after_its_query_was_accepted(
    serve: ServerFactory, handler_runs: list[str], problem: ProblemCheck
) -> None:
    api = serve(Settings(rate_limit=None, max_body_bytes=2048))
    small = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert api.post("/v1/diagnose", content=small, params=HINTS).status_code == 200
    oversized = api.post("/v1/diagnose", content=small * 100, params=HINTS)
    problem(oversized, 413, "body-too-large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced on the bytes read
        for _ in range(100):
            yield small.encode()

    problem(api.post("/v1/diagnose", content=chunks(), params=HINTS), 413, "body-too-large")
    assert handler_runs == ["diagnose"]  # both refused in the hook, reading the body


def _raw_exchange(api: httpx.Client, request: bytes) -> tuple[int, dict[str, object], float]:
    """Send `request` on a new connection; the status, the JSON body and the seconds to the answer."""
    parts = urlsplit(str(api.base_url))
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body), time.monotonic() - started


def _stalled(query: str) -> bytes:
    return (
        f"POST /v1/diagnose?{query} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
        "Content-Length: 1000\r\nConnection: close\r\n\r\n"
    ).encode() + KV_LOG.encode()[:20]


def test_a_stalled_body_is_408_and_a_bad_query_is_still_refused_before_the_body(
    serve: ServerFactory,
) -> None:
    api = serve(Settings(rate_limit=None, body_timeout_s=0.5))
    assert api.post("/v1/diagnose", content=KV_LOG, params=HINTS).status_code == 200
    status, stalled, _ = _raw_exchange(api, _stalled("model=Qwen/Qwen2.5-0.5B-Instruct"))
    assert status == 408 and stalled["type"] == "urn:vramdoc:problem:body-timeout"
    status, refused, seconds = _raw_exchange(api, _stalled("model=Qwen/Qwen2.5-0.5B-Instruct&top=99"))
    assert status == 400 and refused["type"] == "urn:vramdoc:problem:validation-error"
    assert seconds < 0.5  # refused for its query, not waited on for its body: no 408


def test_a_multipart_repeat_is_a_hit_with_the_uploads_answer(
    serve: ServerFactory, handler_runs: list[str]
) -> None:
    api = serve(Settings(rate_limit=None))
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="log"; filename="vllm.log"\r\n'
        f"Content-Type: text/plain\r\n\r\n{KV_LOG}\r\n--{boundary}--\r\n"
    ).encode()
    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
    uploads = [api.post("/v1/diagnose", content=body, headers=headers) for _ in range(2)]
    raw = api.post("/v1/diagnose", content=KV_LOG)
    assert [r.headers["x-cache"] for r in (*uploads, raw)] == ["miss", "hit", "hit"]
    assert uploads[1].content == uploads[0].content == raw.content
    assert handler_runs == ["diagnose", "diagnose"]


# --- the pieces ----------------------------------------------------------------------------------


async def _messages(asgi: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        raise AssertionError("a response never reads the request")

    await asgi({"type": "http"}, receive, send)
    return sent


@pytest.mark.parametrize("cache", ["hit", "miss", "off"])
async def test_json_bytes_sends_the_messages_litestars_response_sends(cache: str) -> None:
    body = b'{"phase": "kv_cache_capacity"}'
    handler_args: dict[str, Any] = {"cookies": [], "headers": {}, "media_type": "", "status_code": 200}
    litestar = Response(body, media_type=MediaType.JSON, headers={"X-Cache": cache})
    expected = await _messages(litestar.to_asgi_response(None, None, **handler_args))  # type: ignore[arg-type]
    got = await _messages(JsonBytes(body, cache).to_asgi_response(None, None, **handler_args))  # type: ignore[arg-type]
    assert got == expected


async def test_json_bytes_is_litestars_response_when_the_route_adds_headers_or_cookies() -> None:
    body = b"{}"
    extra: dict[str, Any] = {
        "headers": {"X-Route": "1"},
        "cookies": [Cookie(key="k", value="v")],
        "media_type": "",
        "status_code": 200,
    }
    litestar = Response(body, media_type=MediaType.JSON, headers={"X-Cache": "hit"})
    expected = await _messages(litestar.to_asgi_response(None, None, **extra))  # type: ignore[arg-type]
    got = await _messages(JsonBytes(body, "hit").to_asgi_response(None, None, **extra))  # type: ignore[arg-type]
    assert got == expected
    assert (b"x-route", b"1") in got[0]["headers"]


def test_the_raw_key_tells_content_types_queries_bodies_and_endpoints_apart() -> None:
    def scope(content_type: bytes, query: bytes, name: bytes = b"content-type") -> Any:
        return {"headers": [(b"host", b"x"), (name, content_type)], "query_string": query}

    base = raw_key("d", "diagnose", scope(b"text/plain", b"top=1"), b"log")
    assert base == raw_key("d", "diagnose", scope(b"text/plain", b"top=1", b"Content-Type"), b"log")
    others = {
        raw_key("d", "diagnose", scope(b"application/json", b"top=1"), b"log"),
        raw_key("d", "diagnose", scope(b"text/plain", b"top=2"), b"log"),
        raw_key("d", "diagnose", scope(b"text/plain", b"top=1"), b"loh"),
        raw_key("d", "classify", scope(b"text/plain", b"top=1"), b"log"),
        raw_key("e", "diagnose", scope(b"text/plain", b"top=1"), b"log"),
    }
    assert base not in others and len(others) == 5


def test_the_hit_index_forgets_its_oldest_entries_past_its_cap() -> None:
    index = HitIndex(max_entries=2)
    for n in range(3):
        index.answered((n, 1), f"diagnose:{n}")
    assert [index.canonical((n, 1)) for n in range(3)] == [None, "diagnose:1", "diagnose:2"]
    index.accept_query("diagnose", b"top=1")
    assert index.query_valid("diagnose", b"top=1")
    assert not index.query_valid("classify", b"top=1") and not index.query_valid("diagnose", b"top=2")
    for n in range(2000):
        index.accept_query("diagnose", b"top=1&model=m%d" % n)
    assert not index.query_valid("diagnose", b"top=1")  # forgotten past 1,024 query strings
    assert index.query_valid("diagnose", b"top=1&model=m1999")
