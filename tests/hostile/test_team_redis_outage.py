"""A real Redis stopped under the service mid-run: diagnosis, estimates, pre-flight and calibration
keep answering (no 500), the team-memory listing says Redis does not answer (503) rather than
claiming no failure, and both work again once Redis is back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from service.api.app import create_app
from service.api.settings import Settings
from service.packs import RulePacks
from service.serving import server_options
from tests.hostile.test_redis_restart import RestartableRedis, _free_port

PROFILE_LOG = (
    Path(__file__).resolve().parents[1] / "healthy" / "v0.20-v1-cudagraph-profiling-advisory.log"
).read_text()
COMMAND = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768"


@pytest.fixture
def redis_server() -> Iterator[RestartableRedis]:
    server = RestartableRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def api(redis_server: RestartableRedis, packs: RulePacks) -> Iterator[httpx.Client]:
    settings = Settings(
        rate_limit=None, cache_ttl_s=0, redis_url=redis_server.url, redis_prefix=f"t-{uuid.uuid4().hex[:8]}"
    )
    config = uvicorn.Config(
        create_app(settings, packs=packs),
        host="127.0.0.1",
        port=_free_port(),
        log_level="warning",
        **server_options(),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{config.port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def _every_new_surface(api: httpx.Client) -> list[int]:
    return [
        api.post("/v1/diagnose", content=PROFILE_LOG, params={"gpu": "H100"}).status_code,
        api.post("/v1/estimate", json={"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "L4"}).status_code,
        api.post("/v1/preflight", json={"command": COMMAND, "gpu": "L4"}).status_code,
        api.get("/v1/fingerprints", params={"days": 30}).status_code,
        api.get("/v1/calibration").status_code,
    ]


def test_a_redis_stopped_mid_run_costs_no_answer_and_calibration_resumes_after(
    api: httpx.Client, redis_server: RestartableRedis
) -> None:
    """The listing's 503 is the one answer that changes: it cannot know what the team met."""
    assert _every_new_surface(api) == [200] * 5
    assert api.get("/v1/calibration").json()["samples"] == 1

    redis_server.stop()
    while_down = _every_new_surface(api)
    listing = api.get("/v1/fingerprints")
    redis_server.start()  # a fresh, empty Redis on the same address
    api.post("/v1/diagnose", content=PROFILE_LOG, params={"gpu": "H100"})
    after = api.get("/v1/calibration")

    assert while_down == [200, 200, 200, 503, 200]
    assert listing.json()["type"] == "urn:vramdoc:problem:team-memory-unreachable"
    assert "does not answer" in listing.json()["detail"]
    assert api.get("/v1/fingerprints").status_code == 200
    assert after.status_code == 200 and after.json()["samples"] == 1
