"""The measured overheads as the estimator applies them: which profile batch each engine runs, how
the sampler warm-up scales, and that every estimate's uncertainty is its era's fitted spread."""

from __future__ import annotations

import msgspec

from service.budget import estimate, overhead_inputs
from service.budget.defaults import v0_scheduler_defaults
from service.budget.overheads import overhead_era
from service.packs.catalog import Catalog, version_tuple
from service.schemas import Budget, EstimateRequest

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def _budget(catalog: Catalog, version: str, max_model_len: int, **more: object) -> Budget:
    request = EstimateRequest(
        model=LLAMA_8B, gpu="H100", vllm_version=version, max_model_len=max_model_len, **more
    )  # type: ignore[arg-type]
    return estimate(request, catalog)


def test_v0_without_chunked_prefill_profiles_whole_prompts_of_max_model_len(catalog: Catalog) -> None:
    """vLLM 0.6 profiles max(max_model_len, max_num_batched_tokens) tokens: a 29k length needs a
    larger activation peak than 20k (issue 13: a 3090 logged 3.81 and 2.89 GiB of KV)."""
    short, long = (_budget(catalog, "0.6.4", n).activation_peak_gib for n in (20000, 29000))
    assert long > short


def test_v0_chunks_prefill_by_default_above_32k_from_055(catalog: Catalog) -> None:
    above = catalog.engine.long_context_chunked_prefill_above_len
    at_limit = _budget(catalog, "0.6.4", above).activation_peak_gib
    chunked = _budget(catalog, "0.6.4", above + 4096).activation_peak_gib
    whole = _budget(catalog, "0.4.3", above + 4096).activation_peak_gib
    assert chunked < at_limit < whole


def test_v1_profiles_max_num_batched_tokens_whatever_the_length(catalog: Catalog) -> None:
    peaks = {_budget(catalog, "0.11.0", n).activation_peak_gib for n in (4096, 32768, 131072)}
    assert len(peaks) == 1


def test_the_sampler_warm_up_holds_whole_logits_on_every_gpu(catalog: Catalog) -> None:
    """vLLM 0.19 logged 1.89 GiB of peak activation for Llama-3.1-8B at TP 1, 2 and 4 alike."""
    peaks = {
        _budget(catalog, "0.19.0", 8192, tensor_parallel_size=tp, gpus=tp).activation_peak_gib
        for tp in (1, 2, 4)
    }
    assert len(peaks) == 1


def test_every_estimate_states_its_eras_fitted_spread(catalog: Catalog) -> None:
    for version in ("0.6.4", "0.11.0", "0.19.0", "0.29.0"):
        budget = _budget(catalog, version, 8192)
        era = overhead_era(catalog.engine, version_tuple(version))
        sources = budget.sources
        assert sources["available_kv_gib"].uncertainty_gib == era.kv_spread_gib
        assert sources["activation_peak_gib"].uncertainty_gib == era.activation.spread_gib
        assert sources["non_torch_gib"].uncertainty_gib == era.non_torch.spread_gib
        assert sources["available_kv_gib"].note and "logged runs" in sources["available_kv_gib"].note


def test_a_v0_run_on_a_v1_release_schedules_with_v0s_defaults(catalog: Catalog) -> None:
    """0.8's `_set_default_args_v0` gives VLLM_USE_V1=0 256 sequences where V1 gets 1024, so the
    sampler warm-up of such a run holds 256 rows of logits, not V1's count."""
    assert v0_scheduler_defaults(catalog.engine) == (256, 2048)
    request = EstimateRequest(model=LLAMA_8B, gpu="H100", vllm_version="0.8.5", max_model_len=4096)
    vocab = 128256
    v1 = overhead_inputs(request, catalog).terms.activation[2]
    v0 = overhead_inputs(request, catalog, "v0").terms.activation[2]
    assert v0 == 256 * vocab < v1
    stated = msgspec.structs.replace(request, max_num_seqs=64)
    assert overhead_inputs(stated, catalog, "v0").terms.activation[2] == 64 * vocab


def test_one_graph_era_holds_the_coefficients_from_017_on(catalog: Catalog) -> None:
    """0.20 moved the CUDA-graph estimate into the KV budget; what vLLM measures did not change, so
    0.19 and 0.29 read the same fitted coefficients and only the budget's graph term differs."""
    older, newer = (overhead_era(catalog.engine, version_tuple(v)) for v in ("0.19.0", "0.29.0"))
    assert older == newer
    assert _budget(catalog, "0.29.0", 8192).cuda_graph_gib > 0
