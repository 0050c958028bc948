"""Identical requests are answered from the response cache, in memory or shared through Redis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import redis

from service.api.settings import Settings

ServerFactory = Callable[[Settings], httpx.Client]
KV_LOG = (Path(__file__).parent / "data" / "kv-capacity-v0.32-qwen.log").read_text()


def test_identical_request_is_a_cache_hit_with_the_same_answer(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None))
    first = api.post("/v1/diagnose", content=KV_LOG)
    second = api.post("/v1/diagnose", content=KV_LOG)
    other = api.post("/v1/diagnose", content=KV_LOG, params={"model": "Qwen/Qwen2.5-0.5B-Instruct"})
    assert (first.headers["x-cache"], second.headers["x-cache"], other.headers["x-cache"]) == (
        "miss",
        "hit",
        "miss",
    )
    assert second.json() == first.json()


def test_a_raw_log_is_keyed_by_its_bytes_and_a_hit_sends_the_stored_answer(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None))
    log = KV_LOG.encode() + b"tail \xff\xfe bytes no UTF-8 decoder accepts\n"
    twin = log.replace(b"tail ", b"tale ")  # same length, one byte apart
    first, second = (api.post("/v1/diagnose", content=log) for _ in range(2))
    other = api.post("/v1/diagnose", content=twin)
    assert [r.headers["x-cache"] for r in (first, second, other)] == ["miss", "hit", "miss"]
    assert second.content == first.content
    as_json = api.post("/v1/diagnose", json={"log": log.decode("utf-8", errors="replace")})
    assert as_json.json() == first.json()  # its own entry (the JSON has no raw bytes), the same answer


def test_cache_off_computes_every_time(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None, cache_ttl_s=0))
    assert [api.post("/v1/classify", content=KV_LOG).headers["x-cache"] for _ in range(2)] == ["off", "off"]


def test_cache_in_redis_is_shared_and_holds_no_secret(
    serve: ServerFactory, redis_url: str, key_prefix: str
) -> None:
    settings = Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix)
    first, second = serve(settings), serve(settings)
    token = "hf_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0"
    log = KV_LOG + f"ERROR HF_TOKEN={token} while loading\n"
    estimate = {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "A100-80GB"}
    assert first.post("/v1/diagnose", content=log).headers["x-cache"] == "miss"
    assert second.post("/v1/diagnose", content=log).headers["x-cache"] == "hit"
    assert first.post("/v1/estimate", json=estimate).headers["x-cache"] == "miss"
    assert second.post("/v1/estimate", json=estimate).headers["x-cache"] == "hit"
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{key_prefix}*"))
        assert len([k for k in keys if b"cache:" in k]) == 2
        for key in keys:
            value = client.get(key) or b""
            assert token.encode() not in value
            assert 0 < client.ttl(key) <= 300
    finally:
        client.close()
