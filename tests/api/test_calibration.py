"""Calibration over HTTP: a diagnosed log that states its memory profile becomes one sample (real
Redis), `GET /v1/calibration` and the Prometheus gauges publish the error, estimates cite it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec
import pytest
import redis

from service.api.settings import Settings
from service.core import diagnose
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, Snapshot

# the fixtures' types (tests/api/conftest.py); not imported, since `conftest` names a module per folder
ServerFactory = Callable[[Settings], httpx.Client]
ProblemCheck = Callable[[httpx.Response, int, str], dict[str, object]]

HEALTHY = Path(__file__).resolve().parents[1] / "healthy"
PROFILE_LOG = (HEALTHY / "v0.20-v1-cudagraph-profiling-advisory.log").read_text()
NO_PROFILE_LOG = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
)


def _settings(redis_url: str, key_prefix: str, **extra: object) -> Settings:
    return Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix.rstrip(":"), **extra)  # type: ignore[arg-type]


def _diagnose(api, log: str, gpu: str | None = "H100") -> None:  # type: ignore[no-untyped-def]
    params = {"gpu": gpu} if gpu else {}
    assert api.post("/v1/diagnose", content=log, params=params).status_code == 200


def test_a_log_stating_its_profile_is_one_sample_with_the_estimators_error(
    serve: ServerFactory, redis_url: str, key_prefix: str, packs: RulePacks
) -> None:
    api = serve(_settings(redis_url, key_prefix, cache_ttl_s=0))
    expected = diagnose(DiagnoseRequest(log=PROFILE_LOG, gpu="H100"), packs).facts.available_kv_cache_gib

    _diagnose(api, PROFILE_LOG)
    _diagnose(api, PROFILE_LOG)  # the same start-up pasted again is not a second sample
    _diagnose(api, NO_PROFILE_LOG)
    report = api.get("/v1/calibration").json()

    assert report["samples"] == 1 and report["min_samples"] == 5
    (group,) = report["groups"]
    assert (group["family"], group["gpu"], group["vllm_minor"]) == ("llama", "H100-SXM-80GB", "0.20")
    assert group["enough"] is False
    kv = group["figures"]["available_kv_gib"]
    assert kv["samples"] == 1 and kv["mean_abs_error_gib"] == abs(kv["mean_error_gib"]) > 0
    assert expected is not None
    client = redis.Redis.from_url(redis_url)
    stored = b"".join(client.get(k) or b"" for k in client.scan_iter(f"{key_prefix}calibration:sample:*"))
    client.close()
    assert stored and b"INFO" not in stored and b"cudagraph" not in stored.lower()  # numbers and ids only
    metrics = api.get("/metrics").text
    gauge = (
        'vramdoc_calibration_error_gib{family="llama",figure="available_kv_gib",gpu="H100-SXM-80GB",'
        'vllm_minor="0.20"}'
    )
    assert f"{gauge} {kv['mean_error_gib']}" in metrics
    assert 'vramdoc_calibration_samples{family="llama",gpu="H100-SXM-80GB",vllm_minor="0.20"} 1.0' in metrics


@pytest.mark.parametrize(("min_samples", "cited"), [(1, True), (2, False)], ids=["enough", "too-few"])
def test_an_estimate_cites_calibration_once_its_group_has_enough_samples(
    serve: ServerFactory, redis_url: str, key_prefix: str, min_samples: int, cited: bool
) -> None:
    api = serve(_settings(redis_url, key_prefix, calibration_min_samples=min_samples))
    _diagnose(api, PROFILE_LOG)

    budget = api.post(
        "/v1/estimate",
        json={"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "H100", "vllm_version": "0.20.0"},
    ).json()

    notes = " ".join(budget["notes"])
    assert (
        "Calibrated on 1 pasted start-ups of llama models on H100-SXM-80GB with vLLM 0.20" in notes
    ) is cited


def test_without_redis_calibration_says_it_needs_it(serve: ServerFactory, problem: ProblemCheck) -> None:
    api = serve(Settings(rate_limit=None))

    _diagnose(api, PROFILE_LOG)  # still diagnoses

    body = problem(api.get("/v1/calibration"), 503, "no-team-memory")
    assert "Calibration lives in Redis" in str(body["detail"])


def _host_snapshot(name: str, total_gib: float, free_gib: float) -> dict[str, object]:
    """What the bot sends for "on gpu-07": the agent's snapshot of a host with one GPU."""
    gpu = {
        "index": 0,
        "uuid": "GPU-0",
        "name": name,
        "total_gib": total_gib,
        "used_gib": round(total_gib - free_gib, 2),
        "free_gib": free_gib,
        "reserved_gib": None,
        "utilization_pct": None,
        "compute_capability": "9.0",
        "mig_mode": False,
    }
    return {
        "host": "gpu-07",
        "captured_at": "2026-12-01T12:00:00Z",
        "driver_version": None,
        "cuda_version": None,
        "gpus": [gpu],
    }


def test_a_log_naming_no_gpu_is_sized_and_calibrated_on_the_snapshots_gpu(
    serve: ServerFactory, redis_url: str, key_prefix: str, packs: RulePacks
) -> None:
    api = serve(_settings(redis_url, key_prefix, cache_ttl_s=0))
    assert diagnose(DiagnoseRequest(log=PROFILE_LOG), packs).budget is None  # the log names no GPU

    snapshot = _host_snapshot("NVIDIA H100 80GB HBM3", 79.65, 79.1)
    answer = api.post("/v1/diagnose", json={"log": PROFILE_LOG, "snapshot": snapshot}).json()
    report = api.get("/v1/calibration").json()

    assert answer["budget"]["gpu"] == "H100-SXM-80GB"
    assert answer["facts"]["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert answer["fact_sources"]["gpu_name"] == answer["fact_sources"]["total_gib"] == "snapshot"
    (group,) = report["groups"]
    assert (group["gpu"], group["samples"]) == ("H100-SXM-80GB", 1)


def test_a_snapshot_gpu_does_not_replace_the_gpu_a_log_states(packs: RulePacks) -> None:
    stated = diagnose(DiagnoseRequest(log=PROFILE_LOG, gpu="A100-80GB"), packs)
    snapshot = msgspec.convert(_host_snapshot("NVIDIA L4", 22.5, 22.0), Snapshot)
    with_host = diagnose(DiagnoseRequest(log=PROFILE_LOG, gpu="A100-80GB", snapshot=snapshot), packs)
    assert stated.budget is not None and with_host.budget is not None
    assert with_host.budget.gpu == stated.budget.gpu and "L4" not in with_host.budget.gpu
