"""What the budget says in words and where each figure comes from (the prose of a Budget).

`verdict` is the one sentence a person reads first; `figure_sources` tells which figures are exact
arithmetic, catalog values, given, or estimates with their uncertainty.
"""

from __future__ import annotations

from service.budget.inputs import GIB, Run
from service.budget.stages import Stage, to_gib
from service.packs.catalog import Catalog
from service.schemas import FigureSource, StartupCheck

__all__ = ["figure_sources", "verdict"]

# Quantized kernels repack weights (Marlin, MoE layouts); logged figures stay within about 3 %.
_QUANT_SPREAD = 0.03


def figure_sources(run: Run, stage: Stage, catalog: Catalog) -> dict[str, FigureSource]:
    o = catalog.engine.overheads
    given = run.kv_cache_memory_bytes is not None
    spread = (
        o.non_torch_uncertainty * GIB
        + stage.activation * o.activation_uncertainty
        + (stage.cuda_graph * o.cuda_graph_uncertainty if stage.graph_in_budget else 0)
    )
    derived = (
        FigureSource(kind="exact", note="from the given kv_cache_memory_bytes")
        if given
        else FigureSource(kind="estimated", uncertainty_gib=to_gib(spread))
    )
    repack = _QUANT_SPREAD * stage.weights.quantized
    weights_note = (
        "computed from the pasted config.json"
        if run.from_config
        else "computed from the catalog architecture"
    )
    return {
        "total_gib": FigureSource(kind="catalog" if run.gpu.spec else "given"),
        "weights_gib": FigureSource(
            kind="given" if run.from_config else "catalog",
            uncertainty_gib=to_gib(repack) if repack else None,
            note=weights_note,
        ),
        "kv_bytes_per_token": FigureSource(kind="exact"),
        "kv_bytes_per_block": FigureSource(kind="exact"),
        "requested_gib": FigureSource(kind="exact", note="ceil(total × gpu_memory_utilization)"),
        "non_torch_gib": FigureSource(kind="estimated", uncertainty_gib=o.non_torch_uncertainty),
        "activation_peak_gib": FigureSource(
            kind="estimated", uncertainty_gib=to_gib(stage.activation * o.activation_uncertainty)
        ),
        "cuda_graph_gib": FigureSource(
            kind="estimated",
            uncertainty_gib=to_gib(stage.cuda_graph * o.cuda_graph_uncertainty),
            note=None if stage.graph_in_budget else "not subtracted from the KV budget in this version",
        ),
        "available_kv_gib": FigureSource(kind="given") if given else derived,
        "num_blocks": derived,
        "kv_cache_tokens": derived,
        "max_model_len_fit": derived,
        "max_concurrency": derived,
    }


def verdict(
    run: Run,
    check: StartupCheck,
    available: int,
    fits_request: bool,
    tokens: int,
    fit_len: int,
    concurrency: float,
    overcommit: bool,
) -> str:
    if check.passes is False:
        better = check.max_passing_utilization
        hint = f"; --gpu-memory-utilization {better} would pass" if better else ""
        return (
            f"vLLM refuses to start: {check.free_gib} GiB free is less than the {check.requested_gib} GiB "
            f"that --gpu-memory-utilization {run.util} requests{hint}."
        )
    if run.kv_cache_memory_bytes is not None and overcommit:
        return (
            f"--kv-cache-memory-bytes {run.kv_cache_memory_bytes} plus the weights exceed the "
            f"{run.gpu.total_gib} GiB of {run.gpu.name}: vLLM runs out of memory allocating the KV cache."
        )
    if available <= 0:
        return "The weights and overheads leave no memory for the KV cache at this utilization."
    if not fits_request:
        return (
            f"The KV cache holds {tokens:,} tokens, too few for one {run.max_model_len:,}-token request; "
            f"the largest max_model_len that fits is {fit_len:,}."
        )
    return (
        f"Fits: {tokens:,} KV-cache tokens, {concurrency:.2f}x concurrency at {run.max_model_len:,} tokens."
    )
