"""A request without a vLLM version: the headline names the release assumed and the older answer."""

from __future__ import annotations

import msgspec

from service.budget import estimate
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def _between(catalog: Catalog, request: EstimateRequest) -> int:
    """A max_model_len the newest release cannot hold but the older default can (or the reverse)."""
    newest = estimate(msgspec.structs.replace(request, vllm_version=catalog.engine.latest), catalog)
    older = estimate(
        msgspec.structs.replace(request, vllm_version=catalog.engine.older_default_release), catalog
    )
    low, high = sorted((newest.max_model_len_fit, older.max_model_len_fit))
    assert low < high
    return (low + high) // 2


def test_a_named_version_gets_no_older_release(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="RTX 4090", vllm_version="0.33.0"), catalog)
    assert (budget.version_assumed, budget.older_release) == (False, None)
    assert "No vLLM version given" not in budget.verdict


def test_without_a_version_the_headline_names_the_release_assumed(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="RTX 4090", max_model_len=8192), catalog)
    assert budget.version_assumed and budget.vllm_version == catalog.engine.latest
    assert f"No vLLM version given: this is vLLM {catalog.engine.latest}." in budget.verdict


def test_the_older_release_uses_its_own_utilization_default_and_leaves_graphs_out(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="RTX 4090", max_model_len=8192), catalog)
    older = budget.older_release
    assert older is not None and older.vllm_version == catalog.engine.older_default_release
    assert (older.gpu_memory_utilization, older.cuda_graphs_in_budget) == (0.9, False)
    assert budget.gpu_memory_utilization != older.gpu_memory_utilization


def test_an_older_verdict_that_differs_is_the_headlines_extra_sentence(catalog: Catalog) -> None:
    request = EstimateRequest(model=LLAMA_8B, gpu="RTX 4090")
    request = msgspec.structs.replace(request, max_model_len=_between(catalog, request))
    budget = estimate(request, catalog)
    older = budget.older_release
    assert older is not None and older.fits != budget.fits
    assert budget.verdict.endswith(f"the answer differs: {older.verdict}")


def test_an_older_kv_pool_of_another_size_is_stated_in_tokens(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="RTX 4090", max_model_len=8192), catalog)
    older = budget.older_release
    assert older is not None and older.fits == budget.fits
    assert older.kv_cache_tokens != budget.kv_cache_tokens
    assert budget.verdict.endswith(f"the KV cache holds {older.kv_cache_tokens:,} tokens.")


def test_a_given_kv_cache_size_leaves_the_answer_alike_and_the_headline_short(catalog: Catalog) -> None:
    request = EstimateRequest(
        model=LLAMA_8B, gpu="RTX 4090", max_model_len=8192, kv_cache_memory_bytes=4 << 30
    )
    budget = estimate(request, catalog)
    assert budget.older_release is not None
    assert budget.older_release.kv_cache_tokens == budget.kv_cache_tokens
    assert budget.verdict.endswith(f"No vLLM version given: this is vLLM {catalog.engine.latest}.")
