"""The per-GPU memory budget: what vLLM requests, where it goes, and what fits (DESIGN §3.4).

requested = ceil(total × utilization) (fact sheet §1); the KV pool gets what remains after weights,
non-torch memory, the activation peak and (from 0.20) the CUDA-graph estimate, unless
kv_cache_memory_bytes replaces the whole calculation. Each figure records whether it is exact
arithmetic, from the catalog, given, or an estimate with its uncertainty.

The work is split by kind: `inputs` resolves the request, `stages` does the per-GPU arithmetic,
`searches` inverts it, `report` writes the words; this module puts them together.
"""

from __future__ import annotations

import msgspec

from service.budget.defaults import v0_scheduler_defaults
from service.budget.inputs import GIB, Run, resolve
from service.budget.kv import largest_fitting_length
from service.budget.overheads import Engine, OverheadTerms, overhead_era, overhead_terms
from service.budget.report import assumed_version_sentence, figure_sources, older_release, verdict
from service.budget.searches import min_tensor_parallel, min_utilization
from service.budget.stages import (
    Stage,
    holds_one_request,
    kv_budget_bytes,
    logged_pool,
    null_block_bytes,
    requested_bytes,
    stage_budgets,
    startup_check,
    to_gib,
    with_file_weights,
)
from service.budget.weights import pp_layer_counts
from service.errors import InputError, InvalidConfigError, UnknownGpuError
from service.packs.catalog import Catalog, OverheadEra
from service.schemas import Budget, EstimateRequest, Facts

__all__ = ["GIB", "OverheadInputs", "budget_from_facts", "estimate", "overhead_inputs"]


class OverheadInputs(msgspec.Struct, frozen=True):
    """What the overhead fit needs of one run: its era, the terms of its fullest GPU, and the
    requested memory and weights (bytes) the KV budget is the remainder of."""

    era: OverheadEra
    terms: OverheadTerms
    requested: int
    weights: int
    graph_in_budget: bool


def overhead_inputs(
    request: EstimateRequest,
    catalog: Catalog,
    kind: Engine | None = None,
    chunked_prefill: bool | None = None,
) -> OverheadInputs:
    """The overhead terms of a request, as tools/fit_overheads.py fits them; `kind` and
    `chunked_prefill` state what a logged run chose where the request cannot say it."""
    run = with_file_weights(resolve(request, catalog), catalog)
    era = overhead_era(catalog.engine, run.version_t, kind)
    if era.whole_prompt_profile and (v0 := v0_scheduler_defaults(catalog.engine)) is not None:
        # a V0 run on a release whose default is V1 schedules with V0's defaults, not V1's
        stated = msgspec.structs.replace(
            request,
            max_num_seqs=request.max_num_seqs or v0[0],
            max_num_batched_tokens=request.max_num_batched_tokens or v0[1],
        )
        run = with_file_weights(resolve(stated, catalog), catalog)
    stages = stage_budgets(run, run.tp, catalog)
    fullest = max(range(len(stages)), key=lambda i: stages[i].weights.total)
    stage, layers = stages[fullest], pp_layer_counts(run.model.num_hidden_layers, run.pp)[fullest]
    return OverheadInputs(
        era=era,
        terms=overhead_terms(run, run.tp, layers, era, catalog.engine, chunked_prefill),
        requested=requested_bytes(run, run.util, catalog),
        weights=stage.weights.total,
        graph_in_budget=stage.graph_in_budget,
    )


def estimate(request: EstimateRequest, catalog: Catalog) -> Budget:
    """The per-GPU memory budget of a model, GPU and vLLM configuration, with what would fit.

    Without a version it is the newest release's answer, and the headline also says what the older
    release most servers run would answer when that differs.
    """
    budget = _estimate(request, catalog)
    if request.vllm_version is not None:
        return budget
    try:
        older = _estimate(
            msgspec.structs.replace(request, vllm_version=catalog.engine.older_default_release), catalog
        )
    except InputError:  # something only newer releases have: the newest answer stands alone
        alternative = None
    else:
        alternative = older_release(older, catalog)
    return msgspec.structs.replace(
        budget,
        version_assumed=True,
        older_release=alternative,
        verdict=f"{budget.verdict} {assumed_version_sentence(budget, alternative)}",
    )


def _estimate(request: EstimateRequest, catalog: Catalog) -> Budget:
    run = with_file_weights(resolve(request, catalog), catalog)
    requested = requested_bytes(run, run.util, catalog)
    stages = stage_budgets(run, run.tp, catalog)
    blocks = [max(0, kv_budget_bytes(run, s, requested)) // s.layout.bytes_per_block for s in stages]
    worst = min(range(len(stages)), key=lambda i: (blocks[i], -stages[i].weights.total))
    stage, num_blocks = stages[worst], blocks[worst]
    available = kv_budget_bytes(run, stage, requested)
    null = null_block_bytes(run, stage.layout, catalog)
    fits_request = all(holds_one_request(run, s, requested, catalog) for s in stages)
    # A fixed KV size skips profiling, so nothing stops it from exceeding the GPU itself.
    # Only the weights count here, not the estimated overheads: a KV size read from a log plus
    # overheads that vLLM measured lower must not turn a run that fitted into one that did not.
    overcommit = run.kv_cache_memory_bytes is not None and any(
        s.weights.total + run.kv_cache_memory_bytes > run.total_bytes for s in stages
    )
    fit_len = 0
    if available > 0 and not overcommit:
        # vLLM searches up to the configured max_model_len, which may exceed the derived one
        # (VLLM_ALLOW_LONG_MAX_MODEL_LEN); below it, the derived length bounds the inversion.
        upper = max(run.max_model_len, run.derived_max_len)
        fit_len = min(
            largest_fitting_length(s.layout, kv_budget_bytes(run, s, requested) - null, upper) for s in stages
        )
    tokens, concurrency = logged_pool(run, stage.layout, num_blocks, catalog) if available > 0 else (0, 0.0)
    check = startup_check(run, requested, catalog)
    return Budget(
        model=run.model_name,
        gpu=run.gpu.name,
        gpus=run.gpus,
        total_gib=run.gpu.total_gib,
        dtype=run.dtype,
        quantization=run.quant.id if run.quant is not None else None,
        kv_cache_dtype=run.kv.id,
        tensor_parallel_size=run.tp,
        pipeline_parallel_size=run.pp,
        gpu_memory_utilization=run.util,
        block_size=stage.layout.block_size,
        max_model_len=run.max_model_len,
        vllm_version=run.version,
        weights_gib=to_gib(stage.weights.total),
        kv_bytes_per_token=stage.layout.bytes_per_token,
        kv_bytes_per_block=stage.layout.bytes_per_block,
        activation_peak_gib=to_gib(stage.activation),
        non_torch_gib=to_gib(stage.non_torch),
        cuda_graph_gib=to_gib(stage.cuda_graph),
        requested_gib=to_gib(requested),
        available_kv_gib=to_gib(available),
        num_blocks=num_blocks,
        kv_cache_tokens=tokens,
        max_model_len_fit=fit_len,
        max_concurrency=round(concurrency, 4),
        startup_check=check,
        fits=check.passes is not False and fits_request and not overcommit,
        verdict=verdict(run, check, available, fits_request, tokens, fit_len, concurrency, overcommit),
        min_gpu_memory_utilization=min_utilization(run, stage, catalog),
        min_tensor_parallel_size=min_tensor_parallel(run, requested, catalog),
        sources=figure_sources(run, stage, catalog),
        notes=run.notes,
        data_parallel_size=run.dp,
        expert_parallel_size=run.ep(run.tp),
        draft_weights_gib=to_gib(stages[-1].weights.draft),
        draft_kv_bytes_per_token=_draft_kv_bytes_per_token(run, stages[-1]),
        encoder_profile_gib=to_gib(stages[0].encoder_profile),
    )


def _draft_kv_bytes_per_token(run: Run, last: Stage) -> int:
    """The drafter's KV bytes per token on the last stage's GPU: MTP layers' or the draft model's."""
    if run.drafter is None:
        return 0
    return run.drafter.mtp_layers * last.layout.bytes_per_token_layer + last.layout.draft_bytes_per_token


def budget_from_facts(
    facts: Facts,
    catalog: Catalog,
    *,
    model: str | None = None,
    gpu: str | None = None,
    vllm_version: str | None = None,
    config: dict[str, object] | None = None,
    parameters: dict[str, int] | None = None,
    strict: bool = False,
) -> Budget | None:
    """The budget for what a log (or request hints) states, or None when the model or GPU is unknown.

    When the log states the KV memory vLLM found, it replaces the estimated overheads, so the pool
    matches the log's own arithmetic. `config`/`parameters` describe a model the catalog lacks (what
    a host's agent read from disk). `strict` raises the reason a stated configuration cannot be
    sized (a pre-flight's command) where a log's budget is just left out.
    """
    name = model or facts.model
    if not name or (gpu is None and facts.gpu_name is None and facts.total_gib is None):
        return None
    kv_bytes = None
    if facts.available_kv_cache_gib is not None and facts.available_kv_cache_gib > 0:
        kv_bytes = round(facts.available_kv_cache_gib * GIB)
    request = EstimateRequest(
        model=name,
        config=config,
        parameters=parameters,
        gpu=gpu or facts.gpu_name,
        gpu_total_gib=facts.total_gib,
        gpus=max(
            1,
            (facts.tensor_parallel_size or 1)
            * (facts.pipeline_parallel_size or 1)
            * (facts.data_parallel_size or 1),
        ),
        data_parallel_size=facts.data_parallel_size,
        enable_expert_parallel=facts.enable_expert_parallel,
        enable_prefix_caching=facts.enable_prefix_caching,
        dtype=facts.dtype,
        quantization=facts.quantization,
        kv_cache_dtype=facts.kv_cache_dtype,
        max_model_len=facts.max_model_len,
        gpu_memory_utilization=facts.gpu_memory_utilization,
        max_num_seqs=facts.max_num_seqs,
        max_num_batched_tokens=facts.max_num_batched_tokens,
        block_size=facts.block_size,
        tensor_parallel_size=facts.tensor_parallel_size,
        pipeline_parallel_size=facts.pipeline_parallel_size,
        kv_cache_memory_bytes=kv_bytes,
        free_gib=facts.free_gib,
        vllm_version=vllm_version or facts.vllm_version,
        enforce_eager=facts.enforce_eager,
        entrypoint=facts.entrypoint,
    )
    try:
        return estimate(request, catalog)
    except InvalidConfigError:
        if request.free_gib is None:
            if strict:
                raise
            return None
        # free memory read from the log that the resolved GPU cannot have (another card than the
        # hint, or free memory at an OOM): the budget stands without the startup check
        return budget_from_facts(
            msgspec.structs.replace(facts, free_gib=None),
            catalog,
            model=model,
            gpu=gpu,
            vllm_version=vllm_version,
            config=config,
            parameters=parameters,
            strict=strict,
        )
    except UnknownGpuError:
        if facts.total_gib is None:
            if strict:
                raise
            return None
        return budget_from_facts(
            msgspec.structs.replace(facts, gpu_name=None),
            catalog,
            model=model,
            vllm_version=vllm_version,
            config=config,
            parameters=parameters,
            strict=strict,
        )
    except InputError:
        if strict:
            raise
        return None
