"""Fixtures for the resolution chain: real config.json files, and a Hub stand-in that serves them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_standin import HubRepo, HubStandIn, safetensors_header_file, serve_hub

from service.models.chain import ModelSettings
from service.packs.catalog import Catalog, load_catalog

CONFIGS = Path(__file__).resolve().parent / "configs"
RULES = Path(__file__).resolve().parents[2] / "rules"
GATED_TOKEN = "hf_standin_accepted_token_0000"

# Per-dtype parameter counts of about the size these checkpoints have (their model cards' totals, split by
# dtype by hand): the tests check what the chain and the budget do with them, not the figures themselves.
HUB_PARAMETERS = {
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {"BF16": 81_324_862_976},
    "moonshotai/Kimi-Linear-48B-A3B-Instruct": {"BF16": 49_122_681_216, "F32": 1_179_648},
    "MiniMaxAI/MiniMax-M2": {"BF16": 2_473_201_664, "F32": 1_998_848, "F8_E4M3": 226_525_478_912},
    "Qwen/Qwen3-VL-235B-A22B-Instruct": {"BF16": 235_693_047_024},
    "nvidia/NVIDIA-Nemotron-Nano-9B-v2": {"BF16": 8_888_227_328},
    # the Gated-DeltaNet hybrids the club-3090 runs serve as local exports (model cards: 27B, 35B)
    "Qwen/Qwen3.6-27B": {"BF16": 27_000_000_000},
    "Qwen/Qwen3.6-35B-A3B": {"BF16": 35_000_000_000},
}


def config(repo_id: str) -> dict[str, object]:
    """The checked-in config.json of `repo_id` (file name: owner--name.json)."""
    loaded: dict[str, object] = json.loads((CONFIGS / f"{repo_id.replace('/', '--')}.json").read_text())
    return loaded


def config_bytes(repo_id: str) -> bytes:
    return (CONFIGS / f"{repo_id.replace('/', '--')}.json").read_bytes()


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(RULES)


def _header_only_repo() -> HubRepo:
    """A repo whose model info has no safetensors summary: the counts come from ranged header reads."""
    shard_one = safetensors_header_file(
        {"model.embed_tokens.weight": ("BF16", [151936, 4096]), "model.norm.weight": ("BF16", [4096])}
    )
    shard_two = safetensors_header_file({"lm_head.weight": ("BF16", [151936, 4096])})
    index = {
        "metadata": {"total_size": 0},
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        },
    }
    return HubRepo(
        files={
            "config.json": config_bytes("Qwen/Qwen3-8B"),
            "model.safetensors.index.json": json.dumps(index).encode(),
            "model-00001-of-00002.safetensors": shard_one,
            "model-00002-of-00002.safetensors": shard_two,
        }
    )


@pytest.fixture
def hub() -> Iterator[HubStandIn]:
    """A Hub stand-in with the real runs' models, a gated repo, a slow repo and a header-only repo."""
    repos = {
        repo_id: HubRepo(files={"config.json": config_bytes(repo_id)}, parameters=parameters)
        for repo_id, parameters in HUB_PARAMETERS.items()
    }
    repos["meta-llama/Llama-3.1-8B-Instruct-gated"] = HubRepo(
        files={"config.json": config_bytes("meta-llama/Llama-3.1-8B-Instruct")},
        parameters={"BF16": 8_030_261_248},
        gated_token=GATED_TOKEN,
    )
    repos["slow/Qwen3-8B"] = HubRepo(files={"config.json": config_bytes("Qwen/Qwen3-8B")}, delay_s=3.0)
    repos["slow-info/Qwen3-8B"] = HubRepo(
        files={"config.json": config_bytes("Qwen/Qwen3-8B")},
        parameters={"BF16": 8_190_735_360},
        info_delay_s=3.0,
    )
    repos["headers/Qwen3-8B-shards"] = _header_only_repo()
    with serve_hub(HubStandIn(repos=repos)) as standin:
        yield standin


@pytest.fixture
def settings(hub: HubStandIn, tmp_path: Path) -> ModelSettings:
    """Chain settings for the stand-in: its endpoint, a private HF cache, a short timeout."""
    return ModelSettings(endpoint=hub.url, cache_dir=str(tmp_path / "hf-cache"), timeout_s=1.0)
