"""Calculators for weights that do not fit: fewer bytes per weight, more GPUs, a larger GPU.

Shortening the context is never among them: it does not shrink weights.
"""

from __future__ import annotations

import math

from service.fixes.calculators import readings
from service.fixes.calculators.parallel import TensorParallelPlan, accepted_sizes, plan_tensor_parallel
from service.fixes.calculators.readings import gib, tokens
from service.fixes.context import Catalog, FixContext, Proposal
from service.schemas import Budget


def quantize_weights(ctx: FixContext) -> list[Proposal]:
    """Online fp8 weight quantization halves 16-bit weights without a new checkpoint."""
    f = ctx.facts
    if ctx.phase == "kv_cache_capacity" and not readings.no_cache_blocks(ctx):
        return []  # smaller weights matter for the KV cache only when they leave it nothing
    if ctx.flag is None or (f.quantization not in (None, "None", "none")):
        return []
    if f.dtype is not None and f.dtype not in (
        "bfloat16",
        "float16",
        "half",
        "auto",
        "torch.bfloat16",
        "torch.float16",
    ):
        return []
    cc = readings.compute_capability(ctx)
    if cc is not None and cc < (8, 0):
        return []
    # fp8 weights arrived for Hopper/Ada in the 0.5 series and as Marlin weight-only for Ampere
    # after it; an older, or unbounded-below, version range may not accept the value at all
    oldest = (0, 5, 0) if cc is not None and cc >= (8, 9) else (0, 6, 0)
    if not ctx.floor_known and any(v is not None for v in ctx.span):
        return []
    if any(v is not None and v < oldest for v in ctx.span):
        return []
    weights, source = readings.weights_total(ctx)
    split = readings.tensor_parallel(ctx) * readings.pipeline_parallel(ctx)
    why = "fp8 stores each weight in one byte instead of two, so the weights take about half the memory."
    likelihood = 0.9
    rerun = ctx.catalog.reestimate(ctx.budget, quantization="fp8") if ctx.catalog and ctx.budget else None
    if rerun is not None:
        why += " " + _rerun_verdict(rerun, "with fp8 weights")
        likelihood = 0.9 if rerun.fits else 0.3
        source = "budget"
    elif weights is not None:
        after = weights / 2 / split
        total, _ = readings.total_gib(ctx)
        why += f" About {gib(weights / split)} per GPU becomes about {gib(after)}."
        if total is not None:
            utilization, _ = readings.utilization(ctx)
            room = utilization * total - readings.per_gpu_reserve(ctx)
            if after > room:
                why += f" That is still more than the {gib(room)} available, so combine it with more GPUs."
                likelihood = 0.3
    if cc is not None and cc < (8, 9):
        why += " On this GPU (compute capability below 8.9) vLLM runs fp8 as weight-only (Marlin)."
    return [
        Proposal(change=f"{ctx.flag} fp8", why=why, source=(source,) if source else (), likelihood=likelihood)
    ]


def _rerun_verdict(rerun: Budget, change: str) -> str:
    """What the budget re-run with a smaller-weights change says: fits, or why it is not enough."""
    said = f"The budget re-run {change} puts {gib(rerun.weights_gib)} of weights on each GPU"
    if rerun.fits:
        return f"{said} and holds one request of {tokens(rerun.max_model_len)} tokens."
    if rerun.max_model_len_fit > 0:
        return (
            f"{said} but holds one request of at most {tokens(rerun.max_model_len_fit)} tokens, fewer "
            f"than {tokens(rerun.max_model_len)}: not enough on its own."
        )
    return f"{said}, still too much for this GPU at this parallelism: not enough on its own."


_FOUR_BIT = ("awq", "gptq", "awq_marlin", "gptq_marlin", "compressed-tensors")


def _named_checkpoint(ctx: FixContext, catalog: Catalog, model: str) -> list[Proposal]:
    """A published quantized checkpoint of this model from the catalog, 4-bit first, with its weights."""
    options = sorted(catalog.checkpoints(model), key=lambda c: c[1] not in _FOUR_BIT)
    if not options:
        return []
    checkpoint, method = options[0]
    why = f"{checkpoint} is {model} quantized with {method}; context length would not help here."
    likelihood, source = 0.85, "catalog"
    if ctx.budget is not None and (rerun := catalog.reestimate(ctx.budget, model=checkpoint)) is not None:
        why += " " + _rerun_verdict(rerun, "with it")
        likelihood = 0.85 if rerun.fits else 0.2
        source = "budget"
    return [Proposal(change=f"serve {checkpoint} instead", why=why, source=(source,), likelihood=likelihood)]


def quantized_checkpoint(ctx: FixContext) -> list[Proposal]:
    """A 4-bit AWQ/GPTQ checkpoint of the same model cuts 16-bit weights to about a quarter."""
    f = ctx.facts
    if ctx.phase == "kv_cache_capacity" and not readings.no_cache_blocks(ctx):
        return []
    if f.quantization not in (None, "None", "none"):
        return []
    model = f.model or (ctx.budget.model if ctx.budget is not None else None)
    if ctx.catalog is not None and model and (named := _named_checkpoint(ctx, ctx.catalog, model)):
        return named
    weights, source = readings.weights_total(ctx)
    split = readings.tensor_parallel(ctx) * readings.pipeline_parallel(ctx)
    name = f"of {model} " if model else ""
    why = (
        "4-bit weights take about a quarter of the memory of 16-bit ones; context length would not help here."
    )
    if weights is not None:
        why += f" About {gib(weights / split)} per GPU becomes about {gib(weights / 4 / split)}."
    return [
        Proposal(
            change=f"serve an AWQ or GPTQ 4-bit checkpoint {name}instead",
            why=why,
            source=(source,) if source else (),
            likelihood=0.85,
        )
    ]


def _fits_weights(ctx: FixContext, weights: float, tp: int, usable_gib: float) -> bool:
    return weights / (tp * readings.pipeline_parallel(ctx)) + readings.per_gpu_reserve(ctx) <= usable_gib


def _max_len_flag(ctx: FixContext) -> str:
    spelled = ctx.pack.spelling(["--max-model-len"], ctx.span) if ctx.pack is not None else None
    return spelled or "--max-model-len"


def tensor_parallel_proposal(ctx: FixContext, plan: TensorParallelPlan, lead: str) -> Proposal:
    """The proposal for a re-estimated TP plan: alone when it holds the request, else the combination."""
    assert ctx.flag is not None and plan.rerun is not None
    rerun, tp = plan.rerun, plan.tp
    configured = ctx.budget.max_model_len if ctx.budget is not None else rerun.max_model_len
    sizes = accepted_sizes(ctx)
    accepted = f" vLLM accepts TP {', '.join(map(str, sizes[0]))} for this model." if sizes else ""
    likelihood = 0.9
    if plan.max_model_len is None:
        change = f"{ctx.flag} {tp}"
        why = (
            f"{lead} The budget re-run at TP {tp} puts {gib(rerun.weights_gib)} of weights on each GPU and "
            f"holds one request of {tokens(configured)} tokens ({gib(rerun.available_kv_gib)} per GPU "
            f"for the KV cache).{accepted}"
        )
    else:
        flag = _max_len_flag(ctx)
        change = f"{ctx.flag} {tp} {flag} {plan.max_model_len}"
        why = (
            f"{lead} TP {tp} alone is not enough: the budget re-run at TP {tp} holds one request of at "
            f"most {tokens(rerun.max_model_len_fit)} tokens, fewer than {tokens(configured)}; with "
            f"{flag} {plan.max_model_len} it fits ({gib(rerun.available_kv_gib)} per GPU for the KV "
            f"cache).{accepted}"
        )
        if plan.holding_tp is not None:
            why += f" TP {plan.holding_tp} holds all {tokens(configured)} tokens on {plan.holding_tp} GPUs."
        likelihood = 0.8
    if ctx.gpus_present is not None and tp > ctx.gpus_present:
        why += f" This needs {tp} GPUs and {ctx.gpus_present} are present."
        likelihood = 0.3
    return Proposal(change=change, why=why, source=("budget",), likelihood=likelihood)


def weights_tensor_parallel(ctx: FixContext) -> list[Proposal]:
    """The smallest accepted tensor-parallel size that holds the weights, re-estimated when possible."""
    weights, source = readings.weights_total(ctx)
    total, _ = readings.total_gib(ctx)
    if weights is None or total is None or ctx.flag is None:
        return []
    current = readings.tensor_parallel(ctx)
    plan = plan_tensor_parallel(ctx, current)
    if plan is not None and plan.rerun is not None:
        lead = f"The weights take {gib(weights)} in all."
        return [tensor_parallel_proposal(ctx, plan, lead)]
    found = accepted_sizes(ctx)
    if found is None or (ctx.budget is not None and ctx.catalog is not None):
        return []  # the budget found no accepted size that fits: more GPUs of this kind do not help
    sizes, rule = found
    utilization, _ = readings.utilization(ctx)
    usable = utilization * total
    candidates = [d for d in sizes if d > current and _fits_weights(ctx, weights, d, usable)]
    if not candidates:
        return []
    tp = candidates[0]
    per_gpu = weights / (tp * readings.pipeline_parallel(ctx))
    why = (
        f"The weights ({gib(weights)} in all) split over {tp} GPUs are {gib(per_gpu)} each, within the "
        f"{gib(usable)} each GPU may use; "
    )
    heads = readings.heads(ctx)
    if rule == "catalog" or heads is None:
        why += f"vLLM accepts TP {tp} for this model."
    else:
        why += f"{tp} divides the {heads} attention heads."
    likelihood = 0.9
    if ctx.gpus_present is not None and tp > ctx.gpus_present:
        why += f" This needs {tp} GPUs and {ctx.gpus_present} are present."
        likelihood = 0.3
    return [Proposal(change=f"{ctx.flag} {tp}", why=why, source=(source, rule), likelihood=likelihood)]


def larger_gpu(ctx: FixContext) -> list[Proposal]:
    """A GPU big enough for the weights at the current parallelism, named from the catalog."""
    weights, source = readings.weights_total(ctx)
    if weights is None:
        return []
    utilization, _ = readings.utilization(ctx)
    split = readings.tensor_parallel(ctx) * readings.pipeline_parallel(ctx)
    # weights plus the reserve, plus the same again for KV cache so the model can serve at all
    needed = (weights / split + readings.per_gpu_reserve(ctx)) * 1.25 / utilization
    total, _ = readings.total_gib(ctx)
    if (total is not None and needed <= total) or needed > 4096:
        return []
    why = (
        f"Each GPU needs about {gib(needed)} at utilization {utilization:.2f} for "
        "weights, activations and some KV cache."
    )
    if ctx.catalog is not None:
        options = ctx.catalog.gpus_with_memory(needed)
        if not options:
            return []  # no single GPU that size exists: more parallelism or quantization is the answer
        name, size = options[0]
        return [
            Proposal(
                change=f"run on {name} GPUs ({size:.0f} GiB each)",
                why=why,
                source=(source, "catalog"),
                likelihood=0.7,
            )
        ]
    return [
        Proposal(
            change=f"run on GPUs with at least {math.ceil(needed)} GiB each",
            why=why,
            source=(source,),
            likelihood=0.6,
        )
    ]
