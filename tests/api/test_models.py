"""`POST /v1/estimate` for models the catalog does not know: the Hub stand-in, the shared cache, errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hub_standin import HubRepo, HubStandIn, serve_hub

from service.api.settings import Settings

ServerFactory = Callable[[Settings], httpx.Client]

CONFIGS = Path(__file__).resolve().parents[1] / "models" / "configs"
NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubStandIn]:
    """A Hub with Qwen3-Next and a gated repo; the service under test is pointed at it."""
    config = (CONFIGS / "Qwen--Qwen3-Next-80B-A3B-Instruct.json").read_bytes()
    repos = {
        NEXT: HubRepo(files={"config.json": config}, parameters={"BF16": 81_324_862_976}),
        "acme/gated-next": HubRepo(files={"config.json": config}, gated_token="hf_standin_token_1"),
    }
    with serve_hub(HubStandIn(repos=repos)) as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
        yield standin


def test_an_unknown_model_is_read_from_the_hub(hub: HubStandIn, serve: ServerFactory) -> None:
    client = serve(Settings(rate_limit=None))
    answer = client.post("/v1/estimate", json={"model": NEXT, "gpu": "H200", "max_model_len": 32768})
    assert answer.status_code == 200, answer.text
    budget = answer.json()
    assert budget["sources"]["model"] == {
        "kind": "given",
        "note": f"config.json from the Hugging Face Hub ({hub.url}) with its safetensors totals",
    }
    assert budget["sources"]["weights_gib"]["kind"] == "exact"


def test_a_resolved_model_is_kept_for_the_next_question(
    hub: HubStandIn, serve: ServerFactory, redis_url: str, key_prefix: str
) -> None:
    client = serve(Settings(rate_limit=None, redis_url=redis_url, redis_prefix=key_prefix))
    first = client.post("/v1/estimate", json={"model": NEXT, "gpu": "H200"})
    asked = len(hub.requests)
    other_gpu = client.post("/v1/estimate", json={"model": NEXT, "gpu": "A100-80GB"})
    assert (first.status_code, other_gpu.status_code) == (200, 200)
    assert len(hub.requests) == asked
    assert other_gpu.headers["X-Cache"] == "miss"


def test_a_gated_repo_answers_a_sentence_naming_the_token(hub: HubStandIn, serve: ServerFactory) -> None:
    client = serve(Settings(rate_limit=None))
    answer = client.post("/v1/estimate", json={"model": "acme/gated-next", "gpu": "H200"})
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["type"] == "urn:vramdoc:problem:model-access"
    assert "HF_TOKEN" in problem["detail"]


def test_a_model_neither_has_is_unknown_with_suggestions(hub: HubStandIn, serve: ServerFactory) -> None:
    client = serve(Settings(rate_limit=None))
    answer = client.post("/v1/estimate", json={"model": "Qwen/Qwen3-8B-Typo", "gpu": "H200"})
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["type"] == "urn:vramdoc:problem:unknown-model"
    assert "Hugging Face Hub" in problem["detail"]
    assert "Qwen/Qwen3-8B" in problem["suggestions"]


def test_a_path_is_not_read_from_the_services_disk(hub: HubStandIn, serve: ServerFactory) -> None:
    client = serve(Settings(rate_limit=None))
    answer = client.post("/v1/estimate", json={"model": "/etc/ssl", "gpu": "H200"})
    assert answer.status_code == 422
    assert "does not read its own disk" in answer.json()["detail"]
