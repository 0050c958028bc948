"""Issue 3's "Must reproduce exactly" list, verbatim."""

from __future__ import annotations

import pytest

from service.budget import GIB, estimate
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def _qwen(catalog: Catalog, version: str, max_model_len: int | None = None) -> EstimateRequest:
    return EstimateRequest(
        model=QWEN,
        gpu="L4",
        dtype="float16",
        block_size=16,
        kv_cache_memory_bytes=16777216,
        vllm_version=version,
        max_model_len=max_model_len,
    )


def test_qwen_16mib_pool_is_85_blocks_and_1360_tokens(catalog: Catalog) -> None:
    budget = estimate(_qwen(catalog, "0.32.0", 2048), catalog)
    assert budget.num_blocks == 85
    assert budget.kv_cache_tokens == 1360
    assert budget.kv_bytes_per_block == 196_608
    assert budget.kv_bytes_per_token == 12_288


def test_qwen_2048_fails_capacity_check_with_estimate_1344_on_0_32(catalog: Catalog) -> None:
    budget = estimate(_qwen(catalog, "0.32.0", 2048), catalog)
    assert not budget.fits
    assert budget.max_model_len_fit == 1344
    assert "1,344" in budget.verdict


def test_qwen_512_passes_capacity_check(catalog: Catalog) -> None:
    budget = estimate(_qwen(catalog, "0.32.0", 512), catalog)
    assert budget.fits
    assert budget.kv_cache_tokens == 1360


def test_qwen_estimate_is_1360_on_0_28_without_null_block_deduction(catalog: Catalog) -> None:
    budget = estimate(_qwen(catalog, "0.28.0", 2048), catalog)
    assert budget.max_model_len_fit == 1360
    assert not budget.fits


def test_startup_check_11_gib_total_9_87_free_default_utilization_fails(catalog: Catalog) -> None:
    request = EstimateRequest(model=QWEN, gpu_total_gib=11.0, free_gib=9.87, vllm_version="0.32.0")
    budget = estimate(request, catalog)
    assert budget.gpu_memory_utilization == 0.92
    assert round(budget.requested_gib, 2) == 10.12
    assert budget.startup_check.passes is False
    assert not budget.fits


def test_startup_check_passes_at_utilization_0_35(catalog: Catalog) -> None:
    request = EstimateRequest(
        model=QWEN, gpu_total_gib=11.0, free_gib=9.87, vllm_version="0.32.0", gpu_memory_utilization=0.35
    )
    assert estimate(request, catalog).startup_check.passes is True


def test_seven_billion_parameters_at_two_bytes_is_about_13_gib() -> None:
    assert round(7e9 * 2 / GIB, 1) == 13.0


def test_32_layers_8_kv_heads_head_dim_128_fp16_is_128_kib_per_token(catalog: Catalog) -> None:
    request = EstimateRequest(
        model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", dtype="float16", vllm_version="0.32.0"
    )
    budget = estimate(request, catalog)
    assert budget.kv_bytes_per_token == 128 * 1024
    assert budget.kv_bytes_per_token * 8192 == GIB


def test_llama_3_1_8b_bf16_weights_match_the_logged_14_9888(catalog: Catalog) -> None:
    request = EstimateRequest(
        model="meta-llama/Llama-3.1-8B-Instruct", gpu="A100-80GB", vllm_version="0.32.0"
    )
    budget = estimate(request, catalog)
    assert budget.weights_gib == pytest.approx(14.9888, abs=5e-5)
    assert round(budget.weights_gib, 2) == 14.99


def test_llama_3_1_8b_with_2_89_gib_of_kv_memory_gives_about_1478_blocks(catalog: Catalog) -> None:
    request = EstimateRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="A10G",
        block_size=16,
        kv_cache_memory_bytes=round(2.89 * GIB),
        max_model_len=8192,
        vllm_version="0.32.0",
    )
    budget = estimate(request, catalog)
    assert budget.num_blocks in (1479, 1478)
    assert budget.num_blocks == round(2.89 * GIB) // (2 * 1024 * 1024)
