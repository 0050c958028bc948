"""Calculators: small pure functions that turn facts into one exact change each, or decline.

Each calculator reads a FixContext and returns Proposals (usually zero or one). It declines
(returns []) when its advice cannot work for the facts at hand, and proposes without a number
(`exact=False`, `needs=[…]`) only where the advice holds anyway. A recipe in `rules/fixes/` names
its calculator by the key in CALCULATORS.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from service.fixes.context import FixContext, GpuChoice, Proposal
from service.fixes.limits import (
    STARTUP_MARGIN_GIB,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    default_utilization,
    divisors,
    max_passing_utilization,
    passes_startup,
    round_down,
    round_up,
)
from service.schemas import GpuInfo

__all__ = ["CALCULATORS", "Calculator"]

Calculator = Callable[[FixContext], list[Proposal]]

_STARTUP_PHASES = frozenset(
    {"startup_budget", "weights_oom", "kv_cache_capacity", "warmup_oom", "profiling_inconsistent"}
)
_CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64)
_KV_HEADROOM_GIB = 0.1
_OOM_MARGIN_GIB = 0.5
_MAX_UTILIZATION = 0.98
_CHECKPOINT_QUANT = re.compile(r"model config \(([\w\-]+)\)")


def _gib(value: float) -> str:
    return f"{value:.2f} GiB"


def _tokens(value: int) -> str:
    return f"{value:,}"


# --- shared readings of the facts ----------------------------------------------------------------


def _utilization(ctx: FixContext) -> tuple[float, str]:
    """The utilization in force and where it came from (the fact, the budget, or the version default)."""
    if ctx.facts.gpu_memory_utilization is not None:
        return ctx.facts.gpu_memory_utilization, ctx.source("gpu_memory_utilization")
    if ctx.budget is not None:
        return ctx.budget.gpu_memory_utilization, "budget"
    return default_utilization(ctx.version), "default"


def _total(ctx: FixContext) -> tuple[float | None, str]:
    if ctx.facts.total_gib is not None:
        return ctx.facts.total_gib, ctx.source("total_gib")
    if ctx.budget is not None:
        return ctx.budget.total_gib, "budget"
    return None, ""


def _tensor_parallel(ctx: FixContext) -> int:
    if ctx.facts.tensor_parallel_size is not None:
        return ctx.facts.tensor_parallel_size
    if ctx.command is not None and (value := ctx.command.value("--tensor-parallel-size")):
        return int(value) if value.isdigit() else 1
    return ctx.budget.tensor_parallel_size if ctx.budget is not None else 1


def _pipeline_parallel(ctx: FixContext) -> int:
    if ctx.facts.pipeline_parallel_size is not None:
        return ctx.facts.pipeline_parallel_size
    return ctx.budget.pipeline_parallel_size if ctx.budget is not None else 1


def _heads(ctx: FixContext) -> int | None:
    return ctx.facts.num_attention_heads


def _others(ctx: FixContext) -> list[tuple[int, float, str | None]]:
    """Other processes holding memory on vLLM's GPU: (pid, GiB, name), largest first."""
    found: list[tuple[int, float, str | None]] = []
    if ctx.facts.other_processes:
        found = [(p.pid, p.used_gib, None) for p in ctx.facts.other_processes]
    elif ctx.gpu is not None and ctx.phase in _STARTUP_PHASES:
        found = [(p.pid, p.used_gib or 0.0, p.name) for p in ctx.gpu.processes]
    return sorted((p for p in found if p[1] > 0), key=lambda p: -p[1])


def _describe_process(pid: int, gib: float, name: str | None) -> str:
    label = f"{name}, " if name else ""
    return f"PID {pid} ({label}{_gib(gib)})"


def _int_flag(ctx: FixContext, fact: int | None, flag: str) -> tuple[int | None, str]:
    if fact is not None:
        return fact, "fact"
    if ctx.command is not None and (value := ctx.command.value(flag)) and value.isdigit():
        return int(value), "command"
    return None, ""


def _weights_total(ctx: FixContext) -> tuple[float | None, str]:
    """All of the model's weights across GPUs, from the budget or the logged per-GPU figure."""
    split = _tensor_parallel(ctx) * _pipeline_parallel(ctx)
    if ctx.budget is not None:
        return (
            ctx.budget.weights_gib * ctx.budget.tensor_parallel_size * ctx.budget.pipeline_parallel_size,
            "budget",
        )
    if ctx.facts.model_weights_gib is not None:
        return ctx.facts.model_weights_gib * split, ctx.source("model_weights_gib")
    return None, ""


# --- startup_budget, weights_oom, profiling_inconsistent ----------------------------------------


def free_other_memory(ctx: FixContext) -> list[Proposal]:
    """Name the processes that hold the memory vLLM needs, so a person can stop them."""
    procs = _others(ctx)
    f = ctx.facts
    gpu = f"GPU {ctx.gpu.index}" if ctx.gpu is not None else "this GPU"
    if procs:
        held = sum(p[1] for p in procs)
        names = ", ".join(_describe_process(*p) for p in procs[:4])
        more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
        source = ctx.sources_of("other_processes") if f.other_processes else ("snapshot",)
        why = f"Other processes hold {_gib(held)} on {gpu}."
        likelihood = 1.0
        if f.requested_gib is not None and f.free_gib is not None:
            short = f.requested_gib - f.free_gib
            enough = held >= short
            why += (
                f" vLLM asked for {_gib(f.requested_gib)} but only {_gib(f.free_gib)} was free, "
                f"{_gib(short)} short; stopping them {'covers' if enough else 'does not fully cover'} that."
            )
            likelihood = 1.0 if enough else 0.6
            source = (*source, *ctx.sources_of("requested_gib"))
        elif ctx.phase == "weights_oom":
            why += " Their memory is not available to load the weights."
        elif ctx.phase == "profiling_inconsistent":
            why += " Memory they allocate or free while vLLM profiles breaks vLLM's measurement."
        why += (
            " Stop the processes themselves (orphaned vLLM workers are common); "
            "do not reset a GPU others use."
        )
        return [
            Proposal(change=f"stop {names}{more} on {gpu}", why=why, source=source, likelihood=likelihood)
        ]
    if ctx.phase == "weights_oom":
        return []
    if f.free_gib is not None and f.total_gib is not None and ctx.phase == "startup_budget":
        used = f.total_gib - f.free_gib
        why = (
            f"{_gib(used)} of {_gib(f.total_gib)} is already in use before vLLM loads anything, "
            "so other processes hold it. The log does not name them; list them with "
            "`nvidia-smi --query-compute-apps=pid,used_memory --format=csv` and stop them."
        )
        return [
            Proposal(
                change=f"stop the processes holding {_gib(used)} on {gpu}",
                why=why,
                source=ctx.sources_of("free_gib", "total_gib"),
                exact=False,
                needs=("other_processes",),
                likelihood=0.8,
            )
        ]
    why = "Another process on the GPU changes how much memory is free while vLLM starts."
    if ctx.phase == "startup_budget":
        why = "Free memory at startup is below what vLLM requests, so other processes hold the difference."
    return [
        Proposal(
            change=f"stop the other processes using {gpu}",
            why=why + " List them with `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`.",
            exact=False,
            needs=("other_processes",),
            likelihood=0.7,
        )
    ]


def _fits_startup(gpu: GpuInfo, utilization: float) -> bool:
    return passes_startup(gpu.free_gib - STARTUP_MARGIN_GIB, gpu.total_gib, utilization)


def switch_gpu(ctx: FixContext) -> list[Proposal]:
    """Point vLLM at GPUs in the snapshot that have the memory it requests (and, for profiling, no

    tenants).
    """
    if ctx.snapshot is None or not ctx.snapshot.gpus:
        return []
    utilization, _ = _utilization(ctx)
    current = ctx.gpu.index if ctx.gpu is not None else None
    quiet = ctx.phase == "profiling_inconsistent"
    usable = [
        g
        for g in ctx.snapshot.gpus
        if g.index != current
        and _fits_startup(g, utilization)
        and not (quiet and g.processes)
        and not g.mig_mode
    ]
    count = _tensor_parallel(ctx) * _pipeline_parallel(ctx)
    if len(usable) < count:
        return []
    chosen = [
        GpuChoice(g.index, g.name, g.free_gib, g.total_gib) for g in sorted(usable, key=lambda g: -g.free_gib)
    ]
    chosen = sorted(chosen[:count], key=lambda c: c.index)
    listed = ", ".join(
        f"GPU {c.index} ({c.name}, {_gib(c.free_gib)} free of {_gib(c.total_gib)})" for c in chosen
    )
    why = f"The snapshot shows {listed}: enough for --gpu-memory-utilization {utilization:.2f} with margin"
    why += ", and no other process on it." if quiet else "."
    indices = ",".join(str(c.index) for c in chosen)
    return [
        Proposal(change=f"CUDA_VISIBLE_DEVICES={indices}", why=why, source=("snapshot",), likelihood=0.95)
    ]


def startup_utilization(ctx: FixContext) -> list[Proposal]:
    """The largest `--gpu-memory-utilization` that passes vLLM's startup check with a safety margin."""
    f = ctx.facts
    if ctx.phase == "weights_oom" and not _others(ctx):
        return []
    if f.free_gib is None or f.total_gib is None or ctx.flag is None:
        return []
    best = max_passing_utilization(f.free_gib, f.total_gib)
    if best is None:
        return []
    current, _ = _utilization(ctx)
    if best >= current:
        return []
    requested = best * f.total_gib
    why = (
        f"{_gib(f.free_gib)} of {_gib(f.total_gib)} is free; vLLM requests utilization × total, so "
        f"{best:.2f} requests {_gib(requested)}, which leaves {_gib(f.free_gib - requested)} spare."
    )
    likelihood = 0.9
    floor = ctx.budget.min_gpu_memory_utilization if ctx.budget is not None else None
    if floor is not None and best < floor:
        why += f" But this model needs at least {floor:.2f} here, so free memory first."
        likelihood = 0.2
    elif ctx.budget is not None:
        why += " The budget still leaves room for the weights and the KV cache."
    return [
        Proposal(
            change=f"{ctx.flag} {best:.2f}",
            why=why,
            source=ctx.sources_of("free_gib", "total_gib") + (("budget",) if floor is not None else ()),
            likelihood=likelihood,
        )
    ]


# --- weights_oom ---------------------------------------------------------------------------------


def _per_gpu_reserve(ctx: FixContext) -> float:
    """Memory besides weights a GPU needs before any KV cache: activations, non-torch, graphs."""
    if ctx.budget is None:
        return 0.0
    b = ctx.budget
    return b.activation_peak_gib + b.non_torch_gib + b.cuda_graph_gib


def quantize_weights(ctx: FixContext) -> list[Proposal]:
    """Online fp8 weight quantization halves 16-bit weights without a new checkpoint."""
    f = ctx.facts
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
    cc = _compute_capability(ctx)
    if cc is not None and cc < (8, 0):
        return []
    weights, source = _weights_total(ctx)
    split = _tensor_parallel(ctx) * _pipeline_parallel(ctx)
    why = "fp8 stores each weight in one byte instead of two, so the weights take about half the memory."
    likelihood = 0.9
    if weights is not None:
        after = weights / 2 / split
        total, _ = _total(ctx)
        why += f" About {_gib(weights / split)} per GPU becomes about {_gib(after)}."
        if total is not None:
            utilization, _ = _utilization(ctx)
            room = utilization * total - _per_gpu_reserve(ctx)
            if after > room:
                why += f" That is still more than the {_gib(room)} available, so combine it with more GPUs."
                likelihood = 0.3
    if cc is not None and cc < (8, 9):
        why += " On this GPU (compute capability below 8.9) vLLM runs fp8 as weight-only (Marlin)."
    return [
        Proposal(change=f"{ctx.flag} fp8", why=why, source=(source,) if source else (), likelihood=likelihood)
    ]


def quantized_checkpoint(ctx: FixContext) -> list[Proposal]:
    """A 4-bit AWQ/GPTQ checkpoint of the same model cuts 16-bit weights to about a quarter."""
    f = ctx.facts
    if f.quantization not in (None, "None", "none"):
        return []
    model = f.model or (ctx.budget.model if ctx.budget is not None else None)
    weights, source = _weights_total(ctx)
    split = _tensor_parallel(ctx) * _pipeline_parallel(ctx)
    name = f"of {model} " if model else ""
    why = (
        "4-bit weights take about a quarter of the memory of 16-bit ones; context length would not help here."
    )
    if weights is not None:
        why += f" About {_gib(weights / split)} per GPU becomes about {_gib(weights / 4 / split)}."
    return [
        Proposal(
            change=f"serve an AWQ or GPTQ 4-bit checkpoint {name}instead",
            why=why,
            source=(source,) if source else (),
            likelihood=0.85,
        )
    ]


def _fits_weights(ctx: FixContext, weights: float, tp: int, usable_gib: float) -> bool:
    return weights / (tp * _pipeline_parallel(ctx)) + _per_gpu_reserve(ctx) <= usable_gib


def weights_tensor_parallel(ctx: FixContext) -> list[Proposal]:
    """The smallest tensor-parallel size that holds the weights and divides the attention heads."""
    heads = _heads(ctx)
    weights, source = _weights_total(ctx)
    total, _ = _total(ctx)
    if heads is None or weights is None or total is None or ctx.flag is None:
        return []
    utilization, _ = _utilization(ctx)
    current = _tensor_parallel(ctx)
    usable = utilization * total
    candidates = [d for d in divisors(heads) if d > current and _fits_weights(ctx, weights, d, usable)]
    if ctx.budget is not None and ctx.budget.min_tensor_parallel_size is not None:
        candidates = [d for d in candidates if d >= ctx.budget.min_tensor_parallel_size]
    if not candidates:
        return []
    tp = candidates[0]
    per_gpu = weights / (tp * _pipeline_parallel(ctx))
    why = (
        f"The weights ({_gib(weights)} in all) split over {tp} GPUs are {_gib(per_gpu)} each, within the "
        f"{_gib(usable)} each GPU may use; {tp} divides the {heads} attention heads."
    )
    likelihood = 0.9
    if ctx.gpus_present is not None and tp > ctx.gpus_present:
        why += f" This needs {tp} GPUs and {ctx.gpus_present} are present."
        likelihood = 0.3
    return [
        Proposal(
            change=f"{ctx.flag} {tp}",
            why=why,
            source=(source, *ctx.sources_of("num_attention_heads")),
            likelihood=likelihood,
        )
    ]


def larger_gpu(ctx: FixContext) -> list[Proposal]:
    """A GPU big enough for the weights at the current parallelism, named from the catalog."""
    weights, source = _weights_total(ctx)
    if weights is None:
        return []
    utilization, _ = _utilization(ctx)
    split = _tensor_parallel(ctx) * _pipeline_parallel(ctx)
    # weights plus the reserve, plus the same again for KV cache so the model can serve at all
    needed = (weights / split + _per_gpu_reserve(ctx)) * 1.25 / utilization
    total, _ = _total(ctx)
    if total is not None and needed <= total:
        return []
    why = (
        f"Each GPU needs about {_gib(needed)} at utilization {utilization:.2f} for "
        "weights, activations and some KV cache."
    )
    if ctx.catalog is not None and (options := ctx.catalog.gpus_with_memory(needed)):
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


# --- kv_cache_capacity, kv_preemption ------------------------------------------------------------


def _kv_need_and_have(ctx: FixContext) -> tuple[float, float, tuple[str, ...]] | None:
    """KV memory one request at max_model_len needs, and what is available, in GiB."""
    f = ctx.facts
    if f.needed_kv_cache_gib is not None and f.available_kv_cache_gib is not None:
        return f.needed_kv_cache_gib, f.available_kv_cache_gib, ctx.sources_of("needed_kv_cache_gib")
    b = ctx.budget
    if b is not None:
        need = (b.kv_bytes_per_token * b.max_model_len + b.kv_bytes_per_block) / 2**30
        return need, b.available_kv_gib, ("budget",)
    return None


def fit_max_model_len(ctx: FixContext) -> list[Proposal]:
    """`--max-model-len` at most the longest request the KV cache holds (vLLM's estimate or the budget's)."""
    f = ctx.facts
    if ctx.flag is None or (f.available_kv_cache_gib is not None and f.available_kv_cache_gib <= 0):
        return []
    configured = f.max_model_len or (ctx.budget.max_model_len if ctx.budget is not None else None)
    estimate, source = f.estimated_max_model_len, ctx.source("estimated_max_model_len")
    if estimate is None and ctx.budget is not None:
        estimate, source = ctx.budget.max_model_len_fit, "budget"
    if estimate is None:
        return [
            Proposal(
                change=f"lower {ctx.flag} below {configured}" if configured else f"lower {ctx.flag}",
                why="The KV cache cannot hold one request of the configured length; a shorter one fits.",
                exact=False,
                needs=("estimated_max_model_len",),
                likelihood=0.7,
            )
        ]
    if estimate <= 0 or (configured is not None and estimate >= configured):
        return []
    why = f"The KV cache holds one request of at most {_tokens(estimate)} tokens"
    why += f" ({source})" if source.startswith("line") else ""
    if configured is not None:
        why += f"; {_tokens(configured)} does not fit."
    else:
        why += "."
    if ctx.version is None or ctx.version >= (0, 14, 0):
        why += f" `{ctx.flag} auto` (vLLM 0.14+) picks the same fit at every start."
    return [Proposal(change=f"{ctx.flag} {estimate}", why=why, source=(source,), likelihood=0.95)]


def _startup_ceiling(ctx: FixContext) -> tuple[float | None, str]:
    """The highest utilization that would still pass the startup check, from free memory."""
    f = ctx.facts
    total, _ = _total(ctx)
    free = f.free_gib
    source = ctx.source("free_gib")
    if free is None and ctx.gpu is not None and ctx.phase in _STARTUP_PHASES:
        free, source = ctx.gpu.free_gib, "snapshot"
    if free is None or total is None:
        return None, ""
    best = max_passing_utilization(free, total)
    return (min(best, _MAX_UTILIZATION) if best is not None else None), source


def raise_utilization(ctx: FixContext) -> list[Proposal]:
    """Give the KV cache more of the GPU, only as far as free memory still passes the startup check."""
    total, total_source = _total(ctx)
    if total is None or ctx.flag is None:
        return []
    current, current_source = _utilization(ctx)
    ceiling, free_source = _startup_ceiling(ctx)
    kv = _kv_need_and_have(ctx)
    if ctx.phase == "kv_cache_capacity":
        if kv is None:
            return []
        need, have, kv_source = kv
        target = round_up(current + (need - have + _KV_HEADROOM_GIB) / total)
        why = (
            f"One request needs {_gib(need)} of KV cache and {_gib(have)} is available; "
            f"{target:.2f} adds {_gib((target - current) * total)}."
        )
    else:
        if ceiling is None:
            return []
        target, kv_source = ceiling, ()
        why = (
            f"Raising {current:.2f} to {target:.2f} gives the KV cache "
            f"{_gib((target - current) * total)} more."
        )
        if ctx.budget is not None and ctx.budget.kv_bytes_per_token > 0:
            extra_tokens = int((target - current) * total * 2**30 / ctx.budget.kv_bytes_per_token)
            why += f" That is about {_tokens(extra_tokens)} more tokens in flight."
    if target <= current:
        return []
    if ceiling is None:
        if target > _MAX_UTILIZATION:
            return []
        return [
            Proposal(
                change=f"{ctx.flag} {target:.2f}",
                why=why + " Check that this much is free on the GPU before starting.",
                source=(current_source, total_source, *kv_source),
                exact=False,
                needs=("free_gib",),
                likelihood=0.5,
            )
        ]
    if target > ceiling:
        return []
    why += f" Free memory allows up to {ceiling:.2f}."
    return [
        Proposal(
            change=f"{ctx.flag} {target:.2f}",
            why=why,
            source=(current_source, total_source, free_source, *kv_source),
            likelihood=0.9,
        )
    ]


def _compute_capability(ctx: FixContext) -> tuple[int, int] | None:
    text = ctx.facts.compute_capability
    if text is None and ctx.gpu is not None:
        text = ctx.gpu.compute_capability
    if text is None:
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", text) or re.match(r"^\s*(\d)(\d)\s*$", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def fp8_kv_cache(ctx: FixContext) -> list[Proposal]:
    """An fp8 KV cache stores twice the tokens, on GPUs with native fp8 only."""
    f = ctx.facts
    if ctx.flag is None or (f.kv_cache_dtype or "auto").startswith(("fp8", "nvfp4", "int")):
        return []
    gpu = f.gpu_name or (ctx.budget.gpu if ctx.budget is not None else None)
    supported = ctx.catalog.gpu_supports_fp8(gpu) if ctx.catalog is not None and gpu else None
    source = "catalog"
    if supported is None and (cc := _compute_capability(ctx)) is not None:
        supported, source = cc >= (8, 9), ctx.source("compute_capability")
    if not supported:
        return []
    why = "fp8 stores each KV element in one byte instead of two, so the same memory holds twice the tokens."
    likelihood = 0.8
    kv = _kv_need_and_have(ctx)
    if ctx.phase == "kv_cache_capacity" and kv is not None:
        need, have, _ = kv
        if need / 2 <= have:
            why += f" One request then needs about {_gib(need / 2)}, within the {_gib(have)} available."
        else:
            why += (
                f" One request would still need about {_gib(need / 2)}, more than the {_gib(have)} available."
            )
            likelihood = 0.3
    return [Proposal(change=f"{ctx.flag} fp8", why=why, source=(source,), likelihood=likelihood)]


def kv_tensor_parallel(ctx: FixContext) -> list[Proposal]:
    """The next tensor-parallel size that divides the heads: each GPU then holds a share of the KV cache."""
    heads = _heads(ctx)
    if heads is None or ctx.flag is None:
        return []
    current = _tensor_parallel(ctx)
    limit = ctx.gpus_present
    larger = [d for d in divisors(heads) if d > current and (limit is None or d <= limit)]
    if not larger:
        return []
    tp = larger[0]
    why = (
        f"With {tp} GPUs each holds 1/{tp} of the weights and of the KV heads, so more memory per GPU "
        f"is left for the KV cache; {tp} divides the {heads} attention heads."
    )
    likelihood = 0.8 if limit is not None else 0.5
    if limit is None:
        why += f" This needs {tp} GPUs."
    return [
        Proposal(
            change=f"{ctx.flag} {tp}",
            why=why,
            source=ctx.sources_of("num_attention_heads"),
            likelihood=likelihood,
        )
    ]


def kv_cache_memory_bytes(ctx: FixContext) -> list[Proposal]:
    """Size the KV cache explicitly (vLLM 0.10.2+): enough for one full-length request, checked against free

    memory.
    """
    f = ctx.facts
    if ctx.flag is None:
        return []
    if ctx.phase == "profiling_inconsistent":
        if f.available_kv_cache_gib is None or f.available_kv_cache_gib <= 0:
            return [
                Proposal(
                    change=f"{ctx.flag} <bytes from a clean start's 'Available KV cache memory'>",
                    why="A fixed KV size skips the memory profiling that other processes disturb.",
                    exact=False,
                    needs=("available_kv_cache_gib",),
                    likelihood=0.6,
                )
            ]
        value = int(f.available_kv_cache_gib * 2**30) // 2**20 * 2**20
        why = (
            f"A fixed KV size of {_gib(value / 2**30)} (what vLLM measured before) skips the memory "
            "profiling that other processes disturb."
        )
        return [
            Proposal(
                change=f"{ctx.flag} {value}",
                why=why,
                source=ctx.sources_of("available_kv_cache_gib"),
                likelihood=0.7,
            )
        ]
    b = ctx.budget
    if b is None:
        return []
    need = b.kv_bytes_per_token * b.max_model_len + b.kv_bytes_per_block
    value = -(-need // 2**20) * 2**20
    free = f.free_gib if f.free_gib is not None else b.startup_check.free_gib
    consumed = b.weights_gib + _per_gpu_reserve(ctx)
    why = (
        f"{_gib(value / 2**30)} holds one request of {_tokens(b.max_model_len)} "
        "tokens regardless of utilization."
    )
    if free is None:
        return [
            Proposal(
                change=f"{ctx.flag} {value}",
                why=why,
                source=("budget",),
                exact=False,
                needs=("free_gib",),
                likelihood=0.4,
            )
        ]
    if consumed + value / 2**30 + STARTUP_MARGIN_GIB > free:
        return []
    why += f" With {_gib(consumed)} for weights and activations it fits the {_gib(free)} free."
    return [Proposal(change=f"{ctx.flag} {value}", why=why, source=("budget",), likelihood=0.7)]


# --- warmup_oom ----------------------------------------------------------------------------------


def _eager(ctx: FixContext) -> bool:
    return bool(ctx.facts.enforce_eager) or (ctx.command is not None and ctx.command.has("--enforce-eager"))


def _sampler_warmup(ctx: FixContext) -> bool:
    return any("sampler" in (x.rule + " " + (x.message or "")).lower() for x in ctx.findings)


def enforce_eager(ctx: FixContext) -> list[Proposal]:
    """Skip CUDA-graph capture entirely (the real flag; `--disable-cuda-graphs` never existed)."""
    if _eager(ctx) or ctx.flag is None:
        return []
    why = (
        "CUDA graphs are captured after the KV cache is allocated and need memory of "
        "their own; eager mode captures none."
    )
    return [Proposal(change=ctx.flag, why=why, likelihood=0.5 if _sampler_warmup(ctx) else 0.95)]


def capture_sizes(ctx: FixContext) -> list[Proposal]:
    """Capture fewer, smaller CUDA graphs, with the flag name the user's vLLM version knows."""
    if _eager(ctx) or ctx.flag is None:
        return []
    seqs, _ = _int_flag(ctx, ctx.facts.max_num_seqs, "--max-num-seqs")
    sizes = [s for s in _CAPTURE_SIZES if seqs is None or s <= seqs] or [1]
    why = (
        "By default vLLM captures graphs for batch sizes up to 512; capturing only "
        f"{', '.join(map(str, sizes))} "
        "needs a fraction of that memory, and larger batches run eagerly."
    )
    return [Proposal(change=f"{ctx.flag} {' '.join(map(str, sizes))}", why=why, likelihood=0.8)]


def lower_max_num_seqs(ctx: FixContext) -> list[Proposal]:
    """Halve `--max-num-seqs`: a smaller sampler warm-up batch, fewer sequences at peak, less preemption."""
    if ctx.flag is None or (ctx.phase == "warmup_oom" and not _sampler_warmup(ctx)):
        return []
    current, origin = _int_flag(ctx, ctx.facts.max_num_seqs, "--max-num-seqs")
    source = ctx.source("max_num_seqs") if origin == "fact" else origin
    total, _ = _total(ctx)
    if current is None:
        current = default_max_num_seqs(ctx.version, ctx.facts.gpu_name, total)
        source = "default"
    reason = {
        "warmup_oom": "the sampler warm-up runs one dummy request per sequence slot",
        "runtime_oom": "fewer concurrent sequences need less activation and KV memory at the peak",
        "kv_preemption": "fewer running sequences compete for the same KV cache, so fewer are preempted",
    }.get(ctx.phase, "fewer concurrent sequences need less memory")
    if current is None:
        return [
            Proposal(
                change=f"lower {ctx.flag} (halve it)",
                why=f"Halving it helps because {reason}.",
                exact=False,
                needs=("max_num_seqs",),
                likelihood=0.7,
            )
        ]
    new = max(1, current // 2)
    if new == current:
        return []
    why = f"From {current} to {new}: {reason}. Change this alone first, then measure."
    return [Proposal(change=f"{ctx.flag} {new}", why=why, source=(source,), likelihood=0.9)]


def lower_max_num_batched_tokens(ctx: FixContext) -> list[Proposal]:
    """Halve `--max-num-batched-tokens`: the prefill chunk sets the activation peak."""
    if ctx.flag is None:
        return []
    f = ctx.facts
    current, origin = _int_flag(ctx, f.max_num_batched_tokens, "--max-num-batched-tokens")
    source = ctx.source("max_num_batched_tokens") if origin == "fact" else origin
    total, _ = _total(ctx)
    if current is None:
        current = default_max_num_batched_tokens(ctx.version, f.gpu_name, total)
        source = "default"
    if current is None:
        return [
            Proposal(
                change=f"lower {ctx.flag} (halve it)",
                why="Fewer tokens per scheduler step lower the activation peak.",
                exact=False,
                needs=("max_num_batched_tokens",),
                likelihood=0.5,
            )
        ]
    seqs, _ = _int_flag(ctx, f.max_num_seqs, "--max-num-seqs")
    new = max(current // 2, seqs or 1)
    if new >= current:
        return []
    why = (
        f"From {_tokens(current)} to {_tokens(new)} tokens per step lowers the activation "
        "peak; change it apart from --max-num-seqs."
    )
    likelihood = 0.8 if ctx.phase == "runtime_oom" else 0.5
    return [Proposal(change=f"{ctx.flag} {new}", why=why, source=(source,), likelihood=likelihood)]


def headroom_utilization(ctx: FixContext) -> list[Proposal]:
    """Lower utilization by what the failed allocation lacked, for memory vLLM's budget does not cover."""
    f = ctx.facts
    total, total_source = _total(ctx)
    if ctx.flag is None or total is None:
        return []
    current, current_source = _utilization(ctx)
    lacking = 0.0
    sources: list[str] = [current_source, total_source]
    if f.tried_to_allocate_gib is not None and f.free_gib is not None:
        lacking = max(0.0, f.tried_to_allocate_gib - f.free_gib)
        sources += ctx.sources_of("tried_to_allocate_gib")
    graphs = ctx.budget.cuda_graph_gib if ctx.budget is not None and ctx.phase == "warmup_oom" else 0.0
    if graphs > lacking:
        lacking = graphs
        sources.append("budget")
    if lacking <= 0 and f.tried_to_allocate_gib is None:
        return []
    target = round_down(current - (lacking + _OOM_MARGIN_GIB) / total)
    if target <= 0.05:
        return []
    what = "CUDA graphs" if ctx.phase == "warmup_oom" else "activations outside the profiled peak"
    why = (
        f"The failed allocation lacked {_gib(lacking)}; {target:.2f} leaves "
        f"{_gib((current - target) * total)} "
        f"outside vLLM's budget for {what}."
    )
    if ctx.phase == "warmup_oom":
        why += " This vLLM version does not count graph memory in its budget."
    floor = ctx.budget.min_gpu_memory_utilization if ctx.budget is not None else None
    likelihood = 0.7
    if floor is not None and target < floor:
        why += f" The model needs at least {floor:.2f}, so prefer the other fixes."
        likelihood = 0.1
    return [
        Proposal(
            change=f"{ctx.flag} {target:.2f}",
            why=why,
            source=tuple(dict.fromkeys(sources)),
            likelihood=likelihood,
        )
    ]


# --- runtime_oom, kv_preemption: actions ---------------------------------------------------------


def cap_request_length(ctx: FixContext) -> list[Proposal]:
    """Cap prompt + max_tokens so every running sequence fits the KV cache at once."""
    f = ctx.facts
    seqs, _ = _int_flag(ctx, f.max_num_seqs, "--max-num-seqs")
    if f.kv_cache_tokens is not None and seqs:
        share = f.kv_cache_tokens // seqs
        why = (
            f"The KV cache holds {_tokens(f.kv_cache_tokens)} tokens, {_tokens(share)} per sequence when "
            f"{seqs} run at once; longer requests force preemption."
        )
        return [
            Proposal(
                change=f"cap prompt + max_tokens at {_tokens(share)} tokens per request in the clients",
                why=why,
                source=ctx.sources_of("kv_cache_tokens"),
                likelihood=0.6,
            )
        ]
    return [
        Proposal(
            change="cap prompt length and max_tokens per request in the clients",
            why="Long requests hold many KV blocks each; capping them lets more requests fit at once.",
            exact=False,
            needs=("kv_cache_tokens", "max_num_seqs"),
            likelihood=0.5,
        )
    ]


def watch_kv_metrics(ctx: FixContext) -> list[Proposal]:
    """Point at the `/metrics` series that show KV pressure, with this version's metric names."""
    usage = (
        "vllm:kv_cache_usage_perc"
        if ctx.version is None or ctx.version >= (0, 9, 2)
        else "vllm:gpu_cache_usage_perc"
    )
    metrics = f"{usage}, vllm:num_preemptions_total and vllm:num_requests_waiting"
    why = (
        "They show whether the KV cache is full and requests wait or are "
        "preempted, before and after each change."
    )
    source: tuple[str, ...] = ()
    if ctx.snapshot is not None and ctx.snapshot.vllm:
        server = ctx.snapshot.vllm[0]
        seen = []
        if server.kv_cache_usage is not None:
            seen.append(f"KV cache {server.kv_cache_usage:.0%} used")
        if server.requests_waiting is not None:
            seen.append(f"{server.requests_waiting} waiting")
        if server.preemptions_total is not None:
            seen.append(f"{server.preemptions_total} preemptions so far")
        if seen:
            why += f" Now: {', '.join(seen)}."
            source = ("snapshot",)
    return [Proposal(change=f"watch {metrics} on /metrics", why=why, source=source, likelihood=0.4)]


# --- request_too_long ----------------------------------------------------------------------------


def fit_max_tokens(ctx: FixContext) -> list[Proposal]:
    """Ask for fewer output tokens: exactly the excess over the model's context length."""
    f = ctx.facts
    if f.requested_tokens is None or f.context_limit is None:
        return [
            Proposal(
                change="lower max_tokens in the request so prompt + max_tokens fits the context",
                why="The request asks for more tokens than the model length allows.",
                exact=False,
                needs=("requested_tokens", "context_limit"),
                likelihood=0.7,
            )
        ]
    excess = f.requested_tokens - f.context_limit
    sources = ctx.sources_of("requested_tokens", "context_limit")
    if excess <= 0:
        return []
    why = (
        f"The request totals {_tokens(f.requested_tokens)} tokens, {_tokens(excess)} over "
        f"the {_tokens(f.context_limit)}-token limit."
    )
    return [
        Proposal(
            change=f"lower max_tokens in the request by at least {_tokens(excess)}",
            why=why + " If the prompt alone exceeds the limit, shorten the prompt instead.",
            source=sources,
            likelihood=0.9,
        )
    ]


def raise_max_model_len(ctx: FixContext) -> list[Proposal]:
    """A larger `--max-model-len`, only when the budget or the logged KV size holds it."""
    f = ctx.facts
    if ctx.flag is None or f.requested_tokens is None:
        return []
    limit = f.context_limit or f.max_model_len
    capacity: int | None = None
    source = ""
    if ctx.budget is not None:
        capacity, source = ctx.budget.max_model_len_fit, "budget"
    elif f.kv_cache_tokens is not None:
        block = f.block_size or 16
        capacity, source = f.kv_cache_tokens - block, ctx.source("kv_cache_tokens")
    if capacity is None:
        return []
    target = round_up(f.requested_tokens, 256)
    target_len = int(target)
    if (limit is not None and target_len <= limit) or target_len > capacity:
        return []
    model = f.model or (ctx.budget.model if ctx.budget is not None else None)
    native = ctx.catalog.max_context(model) if ctx.catalog is not None and model else None
    if native is not None and target_len > native:
        return []
    why = (
        f"The KV cache holds one request of up to {_tokens(capacity)} tokens, so "
        f"{_tokens(target_len)} fits this request."
    )
    return [Proposal(change=f"{ctx.flag} {target_len}", why=why, source=(source,), likelihood=0.6)]


# --- configuration phases ------------------------------------------------------------------------


def fix_tensor_parallel(ctx: FixContext) -> list[Proposal]:
    """A tensor-parallel size that divides the attention heads and is at most the GPUs present."""
    if ctx.flag is None:
        return []
    tp = _tensor_parallel(ctx)
    gpus = ctx.gpus_present
    too_many = gpus is not None and tp > gpus
    if ctx.phase != "parallelism_config" and not too_many:
        return []
    heads = _heads(ctx)
    limit = min(tp, gpus) if gpus is not None else tp
    if heads is None:
        if not too_many or gpus is None:
            return []
        power = 1 << (gpus.bit_length() - 1)
        why = f"{tp} is more than the {gpus} GPUs present; a power of two usually divides the heads."
        return [
            Proposal(
                change=f"{ctx.flag} {power}",
                why=why,
                exact=False,
                needs=("num_attention_heads",),
                likelihood=0.6,
            )
        ]
    valid = [d for d in divisors(heads) if d <= (gpus if gpus is not None else heads)]
    below = [d for d in valid if d <= limit]
    if not below or below[-1] == tp:
        return []
    choice = below[-1]
    shown = ", ".join(map(str, valid))
    why = f"{heads} attention heads divide evenly by {shown}"
    why += f" (with {gpus} GPUs present)" if gpus is not None else ""
    why += f"; {tp} does not work."
    likelihood = 0.95 if ctx.phase == "parallelism_config" else 0.3
    sources = ctx.sources_of("num_attention_heads") + (("snapshot",) if too_many else ())
    return [Proposal(change=f"{ctx.flag} {choice}", why=why, source=sources, likelihood=likelihood)]


def _checkpoint_quantization(ctx: FixContext) -> str | None:
    for finding in ctx.findings:
        if finding.message and (match := _CHECKPOINT_QUANT.search(finding.message)):
            return match.group(1)
    return None


def match_quantization(ctx: FixContext) -> list[Proposal]:
    """Let vLLM read the checkpoint's own quantization method instead of a conflicting `--quantization`."""
    if ctx.flag is None:
        return []
    checkpoint = _checkpoint_quantization(ctx)
    given = ctx.command is not None and ctx.command.has(ctx.flag)
    if given:
        why = (
            "vLLM reads the quantization method from the checkpoint's config; a "
            "different --quantization conflicts with it."
        )
        if checkpoint:
            why = f"The checkpoint is quantized with {checkpoint}; without --quantization vLLM uses that."
        return [Proposal(change=f"remove {ctx.flag}", why=why, source=("command",), likelihood=0.9)]
    if checkpoint:
        why = f"The checkpoint's config says {checkpoint}; pass the same method."
        return [Proposal(change=f"{ctx.flag} {checkpoint}", why=why, likelihood=0.8)]
    return [
        Proposal(
            change=f"drop {ctx.flag}, or set it to the quant_method in the checkpoint's config.json",
            why="The quantization method given does not match the checkpoint or this GPU.",
            exact=False,
            needs=("quantization",),
            likelihood=0.6,
        )
    ]


def supported_quantization(ctx: FixContext) -> list[Proposal]:
    """A checkpoint quantized with a method this GPU runs (AWQ/GPTQ need compute capability 7.5+)."""
    cc = _compute_capability(ctx)
    unsupported = any(
        "not supported" in (x.message or "").lower() or "capability" in (x.message or "").lower()
        for x in ctx.findings
    )
    if not unsupported and cc is None:
        return []
    where = f" (compute capability {cc[0]}.{cc[1]})" if cc is not None else ""
    why = (
        f"The method is not available on this GPU{where}; AWQ and GPTQ checkpoints "
        "run on compute capability 7.5 and newer."
    )
    return [Proposal(change="serve an AWQ or GPTQ checkpoint of the model instead", why=why, likelihood=0.6)]


def float16(ctx: FixContext) -> list[Proposal]:
    """bfloat16 needs compute capability 8.0; float16 runs everywhere."""
    cc = _compute_capability(ctx)
    if ctx.flag is None or (cc is not None and cc >= (8, 0)):
        return []
    where = f"this GPU has compute capability {cc[0]}.{cc[1]}" if cc else "this GPU is older than Ampere"
    why = (
        f"bfloat16 needs compute capability 8.0 and {where}; float16 has the "
        "same size and range for most models."
    )
    source = ctx.sources_of("compute_capability") if cc else ()
    return [Proposal(change=f"{ctx.flag} half", why=why, source=source, likelihood=0.95)]


def _removed_before(removed: tuple[int, int, int] | None, ctx: FixContext) -> bool:
    return removed is not None and (ctx.version is None or ctx.version >= removed)


def unknown_flags(ctx: FixContext) -> list[Proposal]:
    """Flags in the user's command that their vLLM version does not have: rename or remove each."""
    if ctx.command is None or ctx.pack is None:
        return []
    proposals: list[Proposal] = []
    for name, values in ctx.command.flags.items():
        spec = ctx.pack.flag(name)
        if spec is None or spec.exists(ctx.version):
            continue
        version = ".".join(map(str, ctx.version)) if ctx.version else "current releases"
        if spec.never:
            why = f"{name} has never been a vLLM flag."
        elif _removed_before(spec.versions.bounds[1], ctx):
            why = f"{name} was removed in vLLM {spec.versions.removed}; {version} rejects it."
        else:
            why = f"{name} arrived in vLLM {spec.versions.introduced}; {version} rejects it."
        replacement = next(
            (
                r
                for r in (spec.replacement, spec.previous)
                if r is not None and ctx.pack.spelling([r], ctx.version)
            ),
            None,
        )
        likelihood = 1.0 if ctx.phase in ("not_memory", "no_failure") else 0.1
        if replacement is not None:
            kept = " ".join(values) if spec.keep_values and values else ""
            change = f"{replacement} {kept}".rstrip() + f" instead of {name}"
            proposals.append(
                Proposal(
                    change=change,
                    why=why + (f" {spec.note}" if spec.note else ""),
                    source=("command",),
                    likelihood=likelihood,
                )
            )
        else:
            proposals.append(
                Proposal(
                    change=f"remove {name}",
                    why=why + (f" {spec.note}" if spec.note else ""),
                    source=("command",),
                    likelihood=likelihood,
                )
            )
    return proposals


CALCULATORS: dict[str, Calculator] = {
    "free_other_memory": free_other_memory,
    "switch_gpu": switch_gpu,
    "startup_utilization": startup_utilization,
    "quantize_weights": quantize_weights,
    "quantized_checkpoint": quantized_checkpoint,
    "weights_tensor_parallel": weights_tensor_parallel,
    "larger_gpu": larger_gpu,
    "fit_max_model_len": fit_max_model_len,
    "raise_utilization": raise_utilization,
    "fp8_kv_cache": fp8_kv_cache,
    "kv_tensor_parallel": kv_tensor_parallel,
    "kv_cache_memory_bytes": kv_cache_memory_bytes,
    "enforce_eager": enforce_eager,
    "capture_sizes": capture_sizes,
    "lower_max_num_seqs": lower_max_num_seqs,
    "lower_max_num_batched_tokens": lower_max_num_batched_tokens,
    "headroom_utilization": headroom_utilization,
    "cap_request_length": cap_request_length,
    "watch_kv_metrics": watch_kv_metrics,
    "fit_max_tokens": fit_max_tokens,
    "raise_max_model_len": raise_max_model_len,
    "fix_tensor_parallel": fix_tensor_parallel,
    "match_quantization": match_quantization,
    "supported_quantization": supported_quantization,
    "float16": float16,
    "unknown_flags": unknown_flags,
}
