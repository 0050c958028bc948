"""The resolution chain against a real huggingface_hub client and a loopback Hub stand-in."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import msgspec
import pytest
from hub_standin import HubStandIn

from service.budget import GIB, estimate
from service.errors import ModelAccessError, ModelUnavailableError, UnknownModelError
from service.models.chain import DiskModelCache, ModelResolver, ModelSettings, cite
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest, Snapshot, VllmServer

from .conftest import GATED_TOKEN, HUB_PARAMETERS, config

NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def test_hub_gives_config_and_safetensors_totals(hub: HubStandIn, settings: ModelSettings) -> None:
    resolved = ModelResolver(settings).resolve(NEXT)
    assert resolved.source == "hub"
    assert resolved.location == hub.url
    assert resolved.config == config(NEXT)
    assert resolved.parameters == HUB_PARAMETERS[NEXT]
    assert hub.count("HEAD", f"/{NEXT}/resolve/main/config.json") == 1
    assert hub.count("GET", f"/api/models/{NEXT}") == 1


def test_every_model_of_the_real_runs_resolves(hub: HubStandIn, settings: ModelSettings) -> None:
    resolver = ModelResolver(settings)
    for repo_id in HUB_PARAMETERS:
        resolved = resolver.resolve(repo_id)
        assert (resolved.source, resolved.parameters) == ("hub", HUB_PARAMETERS[repo_id])


def test_a_cached_resolution_does_not_ask_the_hub_again(
    hub: HubStandIn, settings: ModelSettings, tmp_path: Path
) -> None:
    first = ModelResolver(settings, DiskModelCache(tmp_path / "models")).resolve(NEXT)
    asked = len(hub.requests)
    again = ModelResolver(settings, DiskModelCache(tmp_path / "models")).resolve(NEXT)
    assert again == first
    assert len(hub.requests) == asked


def test_an_expired_cache_entry_asks_the_hub_again(
    hub: HubStandIn, settings: ModelSettings, tmp_path: Path
) -> None:
    cache = DiskModelCache(tmp_path / "models")
    ModelResolver(dataclasses.replace(settings, ttl_s=-1), cache).resolve(NEXT)
    asked = len(hub.requests)
    ModelResolver(settings, cache).resolve(NEXT)
    assert len(hub.requests) > asked


def test_the_hf_cache_answers_offline_after_a_download(hub: HubStandIn, settings: ModelSettings) -> None:
    ModelResolver(settings).resolve(NEXT)
    asked = len(hub.requests)
    offline = ModelResolver(dataclasses.replace(settings, offline=True)).resolve(NEXT)
    assert offline.source == "hf_cache"
    assert offline.config == config(NEXT)
    assert len(hub.requests) == asked


def test_offline_and_not_cached_says_the_hub_was_not_asked(hub: HubStandIn, settings: ModelSettings) -> None:
    with pytest.raises(UnknownModelError, match="HF_HUB_OFFLINE is set"):
        ModelResolver(dataclasses.replace(settings, offline=True)).resolve(NEXT)
    assert hub.requests == []


def test_a_gated_repo_without_a_token_names_hf_token(hub: HubStandIn, settings: ModelSettings) -> None:
    with pytest.raises(ModelAccessError, match="set HF_TOKEN to a token with access"):
        ModelResolver(settings).resolve("meta-llama/Llama-3.1-8B-Instruct-gated")


def test_a_gated_repo_with_a_token_it_refuses_says_so(hub: HubStandIn, settings: ModelSettings) -> None:
    wrong = dataclasses.replace(settings, token="hf_not_the_right_one")
    with pytest.raises(ModelAccessError, match="the token in HF_TOKEN has no access"):
        ModelResolver(wrong).resolve("meta-llama/Llama-3.1-8B-Instruct-gated")


def test_a_gated_repo_with_its_token_resolves(hub: HubStandIn, settings: ModelSettings) -> None:
    resolved = ModelResolver(dataclasses.replace(settings, token=GATED_TOKEN)).resolve(
        "meta-llama/Llama-3.1-8B-Instruct-gated"
    )
    assert resolved.parameters == {"BF16": 8_030_261_248}


def test_a_repo_the_hub_lacks_is_an_unknown_model(
    hub: HubStandIn, settings: ModelSettings, catalog: Catalog
) -> None:
    request = EstimateRequest(model="Qwen/Qwen3-8B-Typo", gpu="H100")
    with pytest.raises(UnknownModelError) as raised:
        ModelResolver(settings).prepare(request, catalog)
    assert "Hugging Face Hub" in str(raised.value)
    assert "Qwen/Qwen3-8B" in raised.value.suggestions


def test_a_slow_hub_times_out_with_a_sentence(hub: HubStandIn, settings: ModelSettings) -> None:
    with pytest.raises(ModelUnavailableError, match="did not answer"):
        ModelResolver(dataclasses.replace(settings, timeout_s=0.3)).resolve("slow/Qwen3-8B")


def test_totals_that_do_not_arrive_leave_a_partial_answer(hub: HubStandIn, settings: ModelSettings) -> None:
    resolved = ModelResolver(dataclasses.replace(settings, timeout_s=0.5)).resolve("slow-info/Qwen3-8B")
    assert resolved.config == config("Qwen/Qwen3-8B")
    assert resolved.parameters is None
    assert "no safetensors totals" in resolved.notes[0] and "formula" in resolved.notes[0]


def test_without_a_summary_the_headers_are_read_in_ranges(hub: HubStandIn, settings: ModelSettings) -> None:
    resolved = ModelResolver(settings).resolve("headers/Qwen3-8B-shards")
    assert resolved.parameters == {"BF16": 2 * 151936 * 4096 + 4096}
    ranged = [r for method, path, r in hub.requests if method == "GET" and path.endswith(".safetensors")]
    assert len(ranged) == 2 and all(r is not None and r.startswith("bytes=0-") for r in ranged)


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    header = json.dumps(
        {name: {"dtype": d, "shape": s, "data_offsets": [0, 0]} for name, (d, s) in tensors.items()}
    )
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())


def test_a_local_folder_gives_config_and_header_totals(tmp_path: Path, settings: ModelSettings) -> None:
    folder = tmp_path / "my-finetune"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config("Qwen/Qwen3-8B")))
    _write_safetensors(folder / "model-00001-of-00002.safetensors", {"a": ("BF16", [1000, 4096])})
    _write_safetensors(folder / "model-00002-of-00002.safetensors", {"b": ("BF16", [10]), "c": ("F32", [7])})
    resolved = ModelResolver(settings).resolve(str(folder))
    assert resolved.source == "local"
    assert resolved.parameters == {"BF16": 4_096_010, "F32": 7}


def test_the_service_does_not_read_paths_it_is_sent(tmp_path: Path, settings: ModelSettings) -> None:
    with pytest.raises(ModelUnavailableError, match="does not read its own disk"):
        ModelResolver(dataclasses.replace(settings, local_paths=False)).resolve(str(tmp_path))


def test_a_truncated_safetensors_file_leaves_a_note(tmp_path: Path, settings: ModelSettings) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config("Qwen/Qwen3-8B")))
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 1000) + b"{")
    resolved = ModelResolver(settings).resolve(str(folder))
    assert resolved.parameters is None
    assert "truncated" in resolved.notes[0]


def _snapshot(model: str, path: str) -> Snapshot:
    server = VllmServer(
        url="http://127.0.0.1:8000",
        model=model,
        kv_cache_usage=None,
        requests_running=None,
        requests_waiting=None,
        preemptions_total=None,
        model_path=path,
        model_config=config("Qwen/Qwen3-8B"),
        model_parameters={"BF16": 8_190_735_360},
    )
    return Snapshot(
        host="gpu-7",
        captured_at="2026-12-01T09:00:00Z",
        driver_version=None,
        cuda_version=None,
        gpus=[],
        vllm=[server],
    )


def test_a_private_model_an_agent_serves_resolves_from_its_report(settings: ModelSettings) -> None:
    snapshot = _snapshot("acme/private-qwen", "/models/acme/private-qwen")
    resolved = ModelResolver(settings).resolve("acme/private-qwen", [snapshot])
    assert (resolved.source, resolved.location) == ("agent", "gpu-7")
    assert resolved.parameters == {"BF16": 8_190_735_360}
    by_path = ModelResolver(settings).resolve("/models/acme/private-qwen", [snapshot])
    assert by_path.source == "agent"


def test_the_budget_names_the_hub_and_uses_the_checkpoint_bytes(
    hub: HubStandIn, settings: ModelSettings, catalog: Catalog
) -> None:
    request = EstimateRequest(model=NEXT, gpu="H200", max_model_len=32768)
    prepared, resolved = ModelResolver(settings).prepare(request, catalog)
    budget = cite(estimate(prepared, catalog), resolved)
    assert (
        budget.sources["model"].note
        == f"config.json from the Hugging Face Hub ({hub.url}) with its safetensors totals"
    )
    assert budget.sources["weights_gib"].kind == "exact"
    stored = HUB_PARAMETERS[NEXT]["BF16"] * 2
    rope = (
        262144 * 64 * 2
    )  # cos/sin cache rows × rotary dim (256 × 0.25) at bf16, not stored in the checkpoint
    assert budget.weights_gib == pytest.approx((stored + rope) / GIB, abs=1e-3)
    assert any("safetensors bytes" in note for note in budget.notes)


def test_the_catalog_answers_before_any_io(
    hub: HubStandIn, settings: ModelSettings, catalog: Catalog
) -> None:
    request = EstimateRequest(model="Qwen/Qwen3-8B", gpu="H100")
    prepared, resolved = ModelResolver(settings).prepare(request, catalog)
    assert prepared == request and resolved.source == "catalog"
    assert hub.requests == []


def test_resolved_models_round_trip_through_json(hub: HubStandIn, settings: ModelSettings) -> None:
    resolved = ModelResolver(settings).resolve(NEXT)
    assert msgspec.json.decode(msgspec.json.encode(resolved), type=type(resolved)) == resolved


# The club-3090 runs' dual-3090 configuration: TP 2, fp16, fp8_e5m2 KV, MTP with 3 tokens, prefix
# caching, 262,144 tokens (tests/budget/realworld_numbers.yaml, issues 294/295 of that repository).
_DUAL_3090 = {
    "gpu": "RTX-3090",
    "gpus": 2,
    "tensor_parallel_size": 2,
    "dtype": "float16",
    "kv_cache_dtype": "fp8_e5m2",
    "max_model_len": 262_144,
    "vllm_version": "0.22.1",
    "enable_prefix_caching": True,
    "speculative_config": {"method": "mtp", "num_speculative_tokens": 3},
    "kv_cache_memory_bytes": 2 * 179 * 17 * 1600 * 1024,
}


def test_a_gated_deltanet_hybrid_from_the_hub_gets_its_state_layout(
    hub: HubStandIn, settings: ModelSettings, catalog: Catalog
) -> None:
    # block 1600 and 164 + 3 × (2 + 3) = 179 blocks per request: test_architectures.py works them out
    request = msgspec.convert({"model": "Qwen/Qwen3.6-27B", **_DUAL_3090}, EstimateRequest)
    prepared, resolved = ModelResolver(settings).prepare(request, catalog)
    budget = estimate(prepared, catalog)
    assert resolved.source == "hub"
    assert (budget.block_size, budget.num_blocks, budget.max_concurrency) == (1600, 358, 2.0)


def test_a_local_export_of_a_hybrid_resolves_from_its_folder(
    tmp_path: Path, settings: ModelSettings, catalog: Catalog
) -> None:
    folder = tmp_path / "qwen3.6-27b-autoround-int4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config("Qwen/Qwen3.6-27B")))
    request = msgspec.convert({"model": str(folder), **_DUAL_3090}, EstimateRequest)
    prepared, resolved = ModelResolver(settings).prepare(request, catalog)
    assert resolved.source == "local"
    assert estimate(prepared, catalog).kv_cache_tokens == int(358 / 179 * 262_144)
