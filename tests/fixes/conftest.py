"""Fixtures for the fixes tests: the repository's fix pack and budgets with realistic figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.fixes.lookup import CatalogLookup
from service.packs.catalog import load_catalog
from service.packs.fixes import FixPack, load_fix_recipes
from service.schemas import Budget, FigureSource, StartupCheck

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.fixture(scope="session")
def pack() -> FixPack:
    return load_fix_recipes(RULES)


@pytest.fixture
def llama70b_on_a100() -> Budget:
    """Llama-3.1-70B-Instruct, bf16, on one A100-80GB at 0.90: 131.4 GiB of weights cannot fit."""
    return Budget(
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="A100-SXM4-80GB",
        gpus=4,
        total_gib=79.15,
        dtype="bfloat16",
        quantization=None,
        kv_cache_dtype="auto",
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        gpu_memory_utilization=0.9,
        block_size=16,
        max_model_len=8192,
        vllm_version="0.11.0",
        weights_gib=131.42,
        kv_bytes_per_token=327_680,
        kv_bytes_per_block=5_242_880,
        activation_peak_gib=2.1,
        non_torch_gib=0.6,
        cuda_graph_gib=0.0,
        requested_gib=71.24,
        available_kv_gib=-62.88,
        num_blocks=0,
        kv_cache_tokens=0,
        max_model_len_fit=0,
        max_concurrency=0.0,
        startup_check=StartupCheck(free_gib=78.6, requested_gib=71.24, passes=True),
        fits=False,
        verdict="The weights alone (131.42 GiB) exceed the 71.24 GiB vLLM may use.",
        min_tensor_parallel_size=2,
        sources={"weights_gib": FigureSource(kind="exact")},
    )


@pytest.fixture
def llama8b_on_a10() -> Budget:
    """Llama-3.1-8B-Instruct on an A10 (22.06 GiB) at 0.90, 131,072 tokens: weights fit, context not."""
    return Budget(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="A10",
        gpus=1,
        total_gib=22.06,
        dtype="bfloat16",
        quantization=None,
        kv_cache_dtype="auto",
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        gpu_memory_utilization=0.9,
        block_size=16,
        max_model_len=131_072,
        vllm_version="0.10.2",
        weights_gib=14.99,
        kv_bytes_per_token=131_072,
        kv_bytes_per_block=2_097_152,
        activation_peak_gib=1.2,
        non_torch_gib=0.3,
        cuda_graph_gib=0.0,
        requested_gib=19.86,
        available_kv_gib=3.37,
        num_blocks=1725,
        kv_cache_tokens=27_600,
        max_model_len_fit=27_584,
        max_concurrency=0.21,
        startup_check=StartupCheck(free_gib=21.8, requested_gib=19.86, passes=True),
        fits=False,
        verdict="The KV cache holds 27,584 tokens per request; 131,072 does not fit.",
    )


@pytest.fixture(scope="session")
def lookup() -> CatalogLookup:
    """The fixes' view of the repository's real catalog (models, GPUs, checkpoints) and estimator."""
    return CatalogLookup(load_catalog(RULES))
