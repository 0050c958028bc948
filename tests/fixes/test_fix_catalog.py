"""Fixes checked by the budget's own arithmetic, over the real catalog and estimator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from service.budget import estimate
from service.fixes import FixRequest, rank_fixes
from service.fixes.command import edit_of
from service.fixes.context import FixContext
from service.fixes.lookup import CatalogLookup
from service.packs.catalog import load_catalog
from service.packs.fixes import FixPack, load_fix_recipes
from service.schemas import Budget, EstimateRequest, Facts

RULES = Path(__file__).resolve().parents[2] / "rules"
CATALOG = load_catalog(RULES)
PACK = load_fix_recipes(RULES)


def _budget(**request: Any) -> Budget:
    return estimate(EstimateRequest(**request), CATALOG)


def test_catalog_lookup_answers_heads_fp8_context_and_checkpoints(lookup: CatalogLookup) -> None:
    assert lookup.attention_heads("meta-llama/Llama-3.1-70B-Instruct") == 64
    assert lookup.gpu_supports_fp8("NVIDIA H100 80GB HBM3") is True
    assert lookup.gpu_supports_fp8("NVIDIA A100-SXM4-80GB") is False
    assert lookup.gpu_supports_fp8("a GPU nobody sells") is None
    assert lookup.max_context("meta-llama/Llama-3.1-8B-Instruct") == 131_072
    assert ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "awq") in lookup.checkpoints(
        "meta-llama/Llama-3.1-70B-Instruct"
    )
    sizes = [size for _, size in lookup.gpus_with_memory(100)]
    assert sizes == sorted(sizes) and min(sizes) >= 100


def test_weights_oom_tp_and_checkpoint_come_from_the_budget_re_run(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    budget = _budget(
        model="meta-llama/Llama-3.1-70B-Instruct",
        gpu="A100-80GB",
        gpus=1,
        tensor_parallel_size=1,
        max_model_len=8192,
        vllm_version="0.11.0",
    )
    facts = Facts(model="meta-llama/Llama-3.1-70B-Instruct", tried_to_allocate_gib=0.88, free_gib=0.31)
    fixes = rank_fixes(
        FixRequest(phase="weights_oom", facts=facts, budget=budget, engine_version="0.11.0", top=10),
        pack,
        lookup,
    )
    assert fixes[0].change == "--tensor-parallel-size 2"
    assert "budget re-run" in fixes[0].why and fixes[0].source[0] == "budget"
    rerun = lookup.reestimate(budget, tensor_parallel_size=2)
    assert rerun is not None and rerun.available_kv_gib > 0
    checkpoint = next(f for f in fixes if f.id == "use-quantized-checkpoint")
    assert checkpoint.change == "serve hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4 instead"
    assert all("--max-model-len" not in f.change for f in fixes)


def test_kv_capacity_fp8_only_on_a_gpu_the_catalog_says_has_fp8(pack: FixPack, lookup: CatalogLookup) -> None:
    for gpu, offered in (("L4", True), ("A10", False)):
        budget = _budget(
            model="meta-llama/Llama-3.1-8B-Instruct", gpu=gpu, max_model_len=131_072, vllm_version="0.10.2"
        )
        facts = Facts(model="meta-llama/Llama-3.1-8B-Instruct", gpu_name=gpu, max_model_len=131_072)
        fixes = rank_fixes(
            FixRequest(
                phase="kv_cache_capacity", facts=facts, budget=budget, engine_version="0.10.2", top=10
            ),
            pack,
            lookup,
        )
        fp8 = [f for f in fixes if f.id == "use-fp8-kv-cache"]
        assert bool(fp8) == offered, gpu
        if fp8:
            assert "budget re-run" in fp8[0].why


def test_max_model_len_from_the_budget_passes_the_budgets_capacity_check(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    budget = _budget(
        model="meta-llama/Llama-3.1-8B-Instruct", gpu="A10", max_model_len=131_072, vllm_version="0.29.0"
    )
    facts = Facts(model="meta-llama/Llama-3.1-8B-Instruct", gpu_name="A10", max_model_len=131_072)
    fixes = rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=facts, budget=budget, engine_version="0.29.0"),
        pack,
        lookup,
    )
    edit = edit_of(fixes[0].change)
    assert edit is not None and edit.set_flag == "--max-model-len"
    length = int(edit.values[0])
    rerun = lookup.reestimate(budget, max_model_len=length)
    assert rerun is not None and rerun.fits


def test_startup_utilization_passes_the_budgets_startup_check(pack: FixPack, lookup: CatalogLookup) -> None:
    facts = Facts(gpu_memory_utilization=0.9, free_gib=40.2, total_gib=79.19, requested_gib=71.27)
    fixes = rank_fixes(
        FixRequest(phase="startup_budget", facts=facts, engine_version="0.29.0", top=10), pack, lookup
    )
    edit = next(edit_of(f.change) for f in fixes if f.id == "lower-gpu-memory-utilization")
    assert edit is not None
    budget = _budget(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="H100",
        gpu_memory_utilization=float(edit.values[0]),
        free_gib=40.2,
        vllm_version="0.29.0",
    )
    assert budget.startup_check.passes


def test_the_fix_offers_the_utilization_the_budget_says_passes(pack: FixPack, lookup: CatalogLookup) -> None:
    """Issue 11: 22.5 of 79.19 GiB free, a 7B model on an H100. The budget says 0.28 passes and
    holds the model with its fitted overheads; with the 0.5 GiB margin the fix layer's offer fell
    below that floor and no utilization fix was offered. Both now use one startup check
    (service.budget.startup)."""
    model = "Qwen/Qwen2.5-7B-Instruct"
    budget = _budget(model=model, gpu="H100", free_gib=22.5, vllm_version="0.11.0")
    assert budget.total_gib == 79.19 and budget.startup_check.passes is False
    best = budget.startup_check.max_passing_utilization
    assert best == 0.28 and budget.min_gpu_memory_utilization == 0.28
    facts = Facts(
        model=model, gpu_memory_utilization=0.9, free_gib=22.5, total_gib=79.19, requested_gib=71.27
    )
    fixes = rank_fixes(
        FixRequest(phase="startup_budget", facts=facts, budget=budget, engine_version="0.11.0", top=10),
        pack,
        lookup,
    )
    lower = next(f for f in fixes if f.id == "lower-gpu-memory-utilization")
    assert lower.change == "--gpu-memory-utilization 0.28"
    assert "0.33 GiB spare" in lower.why, lower.why
    rerun = lookup.reestimate(budget, gpu_memory_utilization=0.28)
    assert rerun is not None and rerun.startup_check.passes and rerun.fits


def test_no_utilization_is_recommended_below_what_the_model_needs(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    # an orphaned EngineCore holds 70.6 GiB: 0.10 passes the startup check but cannot hold the weights
    budget = _budget(
        model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", free_gib=8.59, vllm_version="0.10.1"
    )
    assert budget.min_gpu_memory_utilization is not None and budget.min_gpu_memory_utilization > 0.10
    facts = Facts(gpu_memory_utilization=0.9, free_gib=8.59, total_gib=79.19, requested_gib=71.27)
    fixes = rank_fixes(
        FixRequest(phase="startup_budget", facts=facts, budget=budget, engine_version="0.10.1"), pack, lookup
    )
    assert [f.id for f in fixes] == ["free-gpu-memory"]


_MODELS = ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"]
_GPUS = ["A10", "L4", "RTX-4090", "A100-80GB", "H100"]


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(_MODELS),
    gpu=st.sampled_from(_GPUS),
    length=st.sampled_from([32_768, 65_536, 131_072]),
    util=st.sampled_from([0.5, 0.7, 0.9]),
    version=st.sampled_from(["0.10.2", "0.20.0", "0.29.0"]),
)
def test_every_budget_based_max_model_len_passes_the_budgets_own_capacity_check(
    model: str, gpu: str, length: int, util: float, version: str
) -> None:
    lookup = CatalogLookup(CATALOG)
    budget = _budget(
        model=model, gpu=gpu, max_model_len=length, gpu_memory_utilization=util, vllm_version=version
    )
    facts = Facts(model=model, gpu_name=gpu, max_model_len=length, gpu_memory_utilization=util)
    for fix in rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=facts, budget=budget, engine_version=version, top=10),
        PACK,
        lookup,
    ):
        edit = edit_of(fix.change)
        if edit is not None and edit.set_flag == "--max-model-len":
            rerun = lookup.reestimate(budget, max_model_len=int(edit.values[0]))
            assert rerun is not None and rerun.fits, (model, gpu, length, util, fix.change)


def test_fp8_weights_are_never_offered_on_a_named_gpu_below_compute_capability_8(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    # A request's GPU hint names the card; the log states no compute capability.
    for gpu, offered in (("T4", False), ("V100", False), ("A100", True), ("H100", True)):
        facts = Facts(model="lmsys/vicuna-7b-v1.3", gpu_name=gpu, num_gpu_blocks=0)
        fixes = rank_fixes(
            FixRequest(phase="weights_oom", facts=facts, engine_version="0.10.2", top=10), pack, lookup
        )
        assert any(f.change == "--quantization fp8" for f in fixes) == offered, gpu


def test_budget_and_fixes_assume_the_same_scheduler_defaults_on_an_a800(pack: FixPack) -> None:
    """Issue 11: engines.yaml excluded the A800 from the large tier, fixes/limits.py did not. vLLM
    0.9.2 to 0.33.0 test `"a100" not in device_name`, so an A800 gets 1024 sequences and 8192
    batched tokens; both layers now read that from engines.yaml."""
    budget = _budget(model="Qwen/Qwen2.5-7B-Instruct", gpu="A800", vllm_version="0.11.0")
    a100 = _budget(model="Qwen/Qwen2.5-7B-Instruct", gpu="A100-80GB", vllm_version="0.11.0")
    assert budget.activation_peak_gib > a100.activation_peak_gib  # 8192 batched tokens vs 2048
    evidence = ["CUDA out of memory occurred when warming up sampler with 1024 dummy requests."]
    for gpu, halved in (("NVIDIA A800-SXM4-80GB", "512"), ("NVIDIA A100-SXM4-80GB", "128")):
        facts = Facts(gpu_name=gpu, total_gib=79.15)
        fixes = rank_fixes(
            FixRequest(phase="warmup_oom", facts=facts, engine_version="0.11.0", evidence=evidence), pack
        )
        seqs = next(f for f in fixes if f.id == "lower-max-num-seqs")
        assert seqs.change == f"--max-num-seqs {halved}", gpu


def test_one_lookup_per_catalog_remembers_tp_sizes_without_sharing_its_lists() -> None:
    lookup = CatalogLookup.for_catalog(CATALOG)
    assert CatalogLookup.for_catalog(CATALOG) is lookup
    assert CatalogLookup.for_catalog(load_catalog(RULES)) is not lookup  # another catalog, another lookup
    fresh = CatalogLookup(CATALOG)
    for model, quant in (("meta-llama/Llama-3.1-70B-Instruct", None), ("Qwen/Qwen2.5-7B-Instruct", "awq")):
        first = lookup.tensor_parallel_sizes(model, quant)
        assert first == fresh.tensor_parallel_sizes(model, quant) and first
        first.append(-1)  # a caller's list is its own: the remembered answer is unchanged
        assert lookup.tensor_parallel_sizes(model, quant) == fresh.tensor_parallel_sizes(model, quant)
    assert lookup.tensor_parallel_sizes("a model nobody trained") is None


def test_a_recipes_view_of_the_context_is_the_context_with_its_flag() -> None:
    ctx = FixContext(phase="kv_cache_capacity", facts=Facts(max_model_len=8192), sources={}, pack=PACK)
    view = ctx.with_flag("--max-model-len")
    assert view == msgspec.structs.replace(ctx, flag="--max-model-len") and view.flag == "--max-model-len"
    assert ctx.flag is None and type(view) is FixContext
