"""Team memory and pre-flight over HTTP: `GET /v1/fingerprints` and `POST /v1/preflight`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec
import pytest
import redis.asyncio as aioredis

from service.api.settings import Settings
from service.schemas import Fingerprint, GpuInfo, PreflightRequest, Snapshot
from service.team_memory import TeamMemory, ThreadRef

# the fixtures' types (tests/api/conftest.py); not imported, since `conftest` names a module per folder
ServerFactory = Callable[[Settings], httpx.Client]
ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]

CONFIGS = Path(__file__).resolve().parents[1] / "models" / "configs"
TOKEN = "alpha-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
COMMAND = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768"


def _record(redis_url: str, prefix: str, print_: Fingerprint, hosts: tuple[str, ...], times: int) -> None:
    async def record() -> None:
        memory = TeamMemory(aioredis.from_url(redis_url), key_prefix=prefix)
        for n in range(times):
            await memory.record(print_, ThreadRef(channel="C0INFRA", ts=f"17000000{n:02d}.000001"), hosts)
        await memory.mark_fixed(print_.key, "lower-max-model-len")
        await memory.close()

    asyncio.run(record())


def test_fingerprints_lists_what_the_bot_recorded_with_hosts_counts_and_the_fix(
    serve: ServerFactory, redis_url: str, key_prefix: str
) -> None:
    kv = Fingerprint(
        key="a1", phase="kv_cache_capacity", rule="vllm-kv", model="m", gpu="L4", vllm_minor="0.32"
    )
    oom = Fingerprint(key="b2", phase="weights_oom", rule="torch-oom", model="m", gpu="L4", vllm_minor="0.32")
    _record(redis_url, key_prefix, kv, ("gpu-07", "gpu-08"), 3)
    _record(redis_url, key_prefix, oom, ("gpu-09",), 1)
    api = serve(Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix.rstrip(":")))

    body = api.get("/v1/fingerprints", params={"days": 30}).json()

    assert body["days"] == 30
    first, second = body["failures"]
    assert first["fingerprint"]["key"] == "a1" and first["sighting"]["count"] == 3
    assert first["sighting"]["hosts"] == ["gpu-07", "gpu-08"]
    assert first["sighting"]["fixed_by"] == "lower-max-model-len"
    assert first["sighting"]["first"]["channel"] == "C0INFRA"
    assert second["fingerprint"]["key"] == "b2"


def test_without_redis_fingerprints_says_team_memory_needs_it(
    serve: ServerFactory, problem: ProblemCheck
) -> None:
    api = serve(Settings(rate_limit=None))

    body = problem(api.get("/v1/fingerprints"), 503, "no-team-memory")

    assert "VRAMDOC_REDIS_URL" in str(body["detail"])


def test_the_new_endpoints_are_bearer_protected_and_in_the_schema(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None, api_tokens=(TOKEN,)))
    request = msgspec.json.encode(PreflightRequest(command=COMMAND, gpu="L4"))

    assert api.get("/v1/fingerprints").status_code == 401
    assert api.post("/v1/preflight", content=request).status_code == 401
    assert api.post("/v1/preflight", content=request, headers=AUTH).status_code == 200
    paths = api.get("/schema/openapi.json").json()["paths"]
    assert {"/v1/fingerprints", "/v1/preflight"} <= set(paths)


def _l4_snapshot(free_gib: float) -> Snapshot:
    gpu = GpuInfo(
        index=0,
        uuid="GPU-0",
        name="NVIDIA L4",
        total_gib=22.49,
        used_gib=round(22.49 - free_gib, 2),
        free_gib=free_gib,
        reserved_gib=0.4,
        utilization_pct=0,
        compute_capability="8.9",
        mig_mode=False,
    )
    return Snapshot(
        host="gpu-11", captured_at="2026-12-01T12:00:00Z", driver_version=None, cuda_version=None, gpus=[gpu]
    )


def test_preflight_answers_the_verdict_for_a_snapshot(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None))
    request = PreflightRequest(command=COMMAND, snapshot=_l4_snapshot(20.0), vllm_version="0.32.0")

    body = api.post("/v1/preflight", content=msgspec.json.encode(request)).json()

    assert body["outcome"] == "refused" and body["host"] == "gpu-11"
    assert body["verdict"].startswith("refused at the startup check: 20 GiB free < 0.92 × 22.49 GiB")
    assert body["corrected_command"].startswith(COMMAND + " --gpu-memory-utilization 0.")
    assert 'vramdoc_preflights_total{outcome="refused"}' in api.get("/metrics").text


def test_preflight_bad_body_names_the_field(serve: ServerFactory, problem: ProblemCheck) -> None:
    api = serve(Settings(rate_limit=None))

    body = problem(api.post("/v1/preflight", json={"command": COMMAND, "top": 99}), 400, "validation-error")

    assert "$.top" in str(body)


def test_preflight_sizes_a_model_the_catalog_lacks_from_its_pasted_config(serve: ServerFactory) -> None:
    api = serve(Settings(rate_limit=None))
    config = json.loads((CONFIGS / "Qwen--Qwen3-8B.json").read_text())
    request = PreflightRequest(
        command="vllm serve acme/private-qwen --max-model-len 8192", gpu="H100", config=config
    )

    body = api.post("/v1/preflight", content=msgspec.json.encode(request)).json()

    assert body["outcome"] == "starts"
    assert body["budget"]["sources"]["model"]["kind"] == "given"


def test_preflight_of_an_unknown_model_names_the_closest(serve: ServerFactory, problem: ProblemCheck) -> None:
    api = serve(Settings(rate_limit=None))
    request = PreflightRequest(command="vllm serve Qwen/Qwen2.5-7B-Instruc --max-model-len 8192", gpu="H100")

    body = problem(api.post("/v1/preflight", content=msgspec.json.encode(request)), 422, "unknown-model")

    assert "Qwen/Qwen2.5-7B-Instruct" in str(body)


def _fingerprint(key: str) -> Fingerprint:
    return Fingerprint(key=key, phase="weights_oom", rule="torch-oom", model="m", gpu="L4", vllm_minor="0.32")


def test_an_unreadable_team_memory_entry_is_left_out_not_fatal_to_the_listing(
    serve: ServerFactory, redis_url: str, key_prefix: str
) -> None:
    _record(redis_url, key_prefix, _fingerprint("good"), ("gpu-07",), 2)
    _record(redis_url, key_prefix, _fingerprint("torn"), ("gpu-08",), 1)
    _record(redis_url, key_prefix, _fingerprint("garbled"), ("gpu-09",), 1)

    async def damage() -> None:
        client = aioredis.from_url(redis_url)
        fingerprints = [k async for k in client.scan_iter(f"{key_prefix}*") if b"torn" in k and b":" in k]
        main = min(fingerprints, key=len)  # the sighting hash, not its :hosts/:threads
        await client.hset(main, "fingerprint", b"{not json")
        garbled = min([k async for k in client.scan_iter(f"{key_prefix}*garbled*")], key=len)
        await client.hset(garbled, "count", b"many")
        await client.aclose()

    asyncio.run(damage())
    api = serve(Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix.rstrip(":")))

    response = api.get("/v1/fingerprints", params={"days": 30})

    assert response.status_code == 200
    assert [row["fingerprint"]["key"] for row in response.json()["failures"]] == ["good"]


def test_a_listing_ranks_only_the_most_recently_seen_fingerprints(
    serve: ServerFactory, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("service.team_memory.MAX_RANKED", 2)
    _record(redis_url, key_prefix, _fingerprint("oldest-but-most-frequent"), (), 5)
    _record(redis_url, key_prefix, _fingerprint("newer"), (), 1)
    _record(redis_url, key_prefix, _fingerprint("newest"), (), 1)
    api = serve(Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix.rstrip(":")))

    rows = api.get("/v1/fingerprints", params={"days": 30, "limit": 10}).json()["failures"]

    assert sorted(row["fingerprint"]["key"] for row in rows) == ["newer", "newest"]
