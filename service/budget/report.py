"""What the budget says in words and where each figure comes from (the prose of a Budget).

`verdict` is the one sentence a person reads first; `figure_sources` tells which figures are exact
arithmetic, catalog values, given, or estimates with their uncertainty.
"""

from __future__ import annotations

from service.budget.inputs import Run
from service.budget.multimodal import profiled_images
from service.budget.stages import Stage, to_gib
from service.packs.catalog import Catalog, OverheadEra, version_tuple
from service.schemas import Budget, FigureSource, OlderRelease, StartupCheck

__all__ = ["assumed_version_sentence", "figure_sources", "older_release", "verdict"]

# Quantized kernels repack weights (Marlin, MoE layouts); logged figures stay within about 3 %.
_QUANT_SPREAD = 0.03


def figure_sources(run: Run, stage: Stage, catalog: Catalog) -> dict[str, FigureSource]:
    # Uncertainties are the residual spreads of the era's fit to logged runs (tools/fit_overheads.py)
    era = stage.era
    given = run.kv_cache_memory_bytes is not None
    derived = (
        FigureSource(kind="exact", note="from the given kv_cache_memory_bytes")
        if given
        else FigureSource(kind="estimated", uncertainty_gib=era.kv_spread_gib, note=_fit_note(era))
    )
    repack = _QUANT_SPREAD * stage.weights.quantized
    weights_note = (
        run.weights_from
        if run.weights_from is not None
        else "the checkpoint's safetensors bytes, split by the architecture"
        if run.weight_scale is not None
        else "computed from the pasted config.json"
        if run.from_config
        else "computed from the catalog architecture"
    )
    return {
        "total_gib": FigureSource(kind="catalog" if run.gpu.spec else "given"),
        "weights_gib": FigureSource(
            kind="exact" if run.weight_scale is not None else "given" if run.from_config else "catalog",
            uncertainty_gib=to_gib(repack) if repack else None,
            note=weights_note,
        ),
        "kv_bytes_per_token": FigureSource(kind="exact"),
        "kv_bytes_per_block": FigureSource(kind="exact"),
        "requested_gib": FigureSource(kind="exact", note="ceil(total × gpu_memory_utilization)"),
        "non_torch_gib": FigureSource(kind="estimated", uncertainty_gib=era.non_torch.spread_gib),
        "activation_peak_gib": FigureSource(kind="estimated", uncertainty_gib=era.activation.spread_gib),
        "cuda_graph_gib": FigureSource(
            kind="estimated",
            uncertainty_gib=0.0 if stage.cuda_graph == 0 else era.cuda_graph.spread_gib,
            note=None if stage.graph_in_budget else "not subtracted from the KV budget in this version",
        ),
        "available_kv_gib": FigureSource(kind="given") if given else derived,
        **_encoder_source(run, stage, era),
        "num_blocks": derived,
        "kv_cache_tokens": derived,
        "max_model_len_fit": derived,
        "max_concurrency": derived,
    }


def _fit_note(era: OverheadEra) -> str:
    """Where the KV figures' uncertainty comes from: the fit's spread on logged runs of the era."""
    low, high = era.versions.introduced, era.versions.removed
    releases = " ".join(
        part for part in ("vLLM", f"{low} and later" if low else "", f"before {high}" if high else "") if part
    )
    if era.kv_runs == 0:
        return f"± the fitted overheads' spread of the releases before (no logged runs of {releases} yet)"
    return f"± the fitted overheads' spread on {era.kv_runs} logged runs of {releases}"


def _encoder_source(run: Run, stage: Stage, era: OverheadEra) -> dict[str, FigureSource]:
    images, tokens = profiled_images(run)
    if images == 0:
        return {}
    note = (
        f"vLLM profiles the vision encoder with {images} images of {tokens} tokens "
        "(encoder_budget.py) and holds their embeddings through the decoder's profile run"
    )
    # the tower's activation is the era's activation fit applied to its patches
    spread = era.activation.spread_gib if stage.encoder_profile else None
    return {"encoder_profile_gib": FigureSource(kind="estimated", uncertainty_gib=spread, note=note)}


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
            f"the longest --max-model-len that fits is {fit_len:,}."
        )
    return (
        f"Fits: {tokens:,} KV-cache tokens, {concurrency:.2f}x concurrency at {run.max_model_len:,} tokens."
    )


def older_release(older: Budget, catalog: Catalog) -> OlderRelease:
    """The older release's answer, with the two defaults that make it differ."""
    profiled = version_tuple(older.vllm_version) >= version_tuple(catalog.engine.cudagraph_profiled_since)
    return OlderRelease(
        vllm_version=older.vllm_version,
        gpu_memory_utilization=older.gpu_memory_utilization,
        cuda_graphs_in_budget=profiled,
        fits=older.fits,
        kv_cache_tokens=older.kv_cache_tokens,
        max_model_len_fit=older.max_model_len_fit,
        verdict=older.verdict,
    )


def assumed_version_sentence(budget: Budget, older: OlderRelease | None) -> str:
    """Which release was assumed, and what the older one would answer when that differs."""
    said = f"No vLLM version given: this is vLLM {budget.vllm_version}."
    if older is None or (older.fits == budget.fits and older.kv_cache_tokens == budget.kv_cache_tokens):
        return said
    graphs = (
        "CUDA graphs in the KV budget" if older.cuda_graphs_in_budget else "CUDA graphs outside the KV budget"
    )
    on = f"On vLLM {older.vllm_version} (utilization {older.gpu_memory_utilization:g}, {graphs})"
    if older.fits != budget.fits:
        return f"{said} {on} the answer differs: {older.verdict}"
    return f"{said} {on} the KV cache holds {older.kv_cache_tokens:,} tokens."
