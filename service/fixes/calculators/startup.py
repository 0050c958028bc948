"""Calculators for a vLLM that cannot get the memory it asks for: free it, move, or ask for less."""

from __future__ import annotations

from service.fixes.calculators import readings
from service.fixes.calculators.readings import gib
from service.fixes.context import FixContext, GpuChoice, Proposal
from service.fixes.limits import (
    STARTUP_MARGIN_GIB,
    max_passing_utilization,
    passes_startup,
)
from service.schemas import GpuInfo


def free_other_memory(ctx: FixContext) -> list[Proposal]:
    """Name the processes that hold the memory vLLM needs, so a person can stop them."""
    procs = readings.others(ctx)
    f = ctx.facts
    gpu = f"GPU {ctx.gpu.index}" if ctx.gpu is not None else "this GPU"
    if procs:
        held = sum(p[1] for p in procs)
        names = ", ".join(readings.describe_process(*p) for p in procs[:4])
        more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
        source = ctx.sources_of("other_processes") if f.other_processes else ("snapshot",)
        why = f"Other processes hold {gib(held)} on {gpu}."
        likelihood = 1.0
        if f.requested_gib is not None and f.free_gib is not None:
            short = f.requested_gib - f.free_gib
            enough = held >= short
            why += (
                f" vLLM asked for {gib(f.requested_gib)} but only {gib(f.free_gib)} was free, "
                f"{gib(short)} short; stopping them {'covers' if enough else 'does not fully cover'} that."
            )
            likelihood = 1.0 if enough else 0.6
            source = (*source, *ctx.sources_of("requested_gib"))
        elif ctx.phase == "weights_oom":
            why += " Their memory is not available to load the weights."
        elif ctx.phase == "profiling_inconsistent":
            why += " Memory they allocate or free while vLLM profiles breaks vLLM's measurement."
        elif ctx.phase == "kv_cache_capacity":
            why += (
                " vLLM sized its KV cache for the memory free when it profiled; what they took since "
                "left too little to allocate it."
            )
        why += (
            " Stop the processes themselves (orphaned vLLM workers are common); "
            "do not reset a GPU others use."
        )
        return [
            Proposal(change=f"stop {names}{more} on {gpu}", why=why, source=source, likelihood=likelihood)
        ]
    if ctx.phase == "weights_oom":
        return []
    if ctx.phase == "kv_cache_capacity":
        why = (
            "vLLM sized its KV cache for the memory free when it profiled, and the memory was gone when "
            "it allocated the cache: another process (a second vLLM instance, a job started meanwhile) "
            "took it. Find it with `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` and "
            "stop it, or start the instances one after another."
        )
        return [
            Proposal(
                change=f"stop the processes that took memory on {gpu} while vLLM started",
                why=why,
                exact=False,
                needs=("other_processes",),
                likelihood=0.7,
            )
        ]
    if f.free_gib is not None and f.total_gib is not None and ctx.phase == "startup_budget":
        used = f.total_gib - f.free_gib
        why = (
            f"{gib(used)} of {gib(f.total_gib)} is already in use before vLLM loads anything, "
            "so other processes hold it. The log does not name them; list them with "
            "`nvidia-smi --query-compute-apps=pid,used_memory --format=csv` and stop them."
        )
        return [
            Proposal(
                change=f"stop the processes holding {gib(used)} on {gpu}",
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
    """Point vLLM at snapshot GPUs with the memory it requests (for profiling: with no tenants)."""
    if ctx.snapshot is None or not ctx.snapshot.gpus:
        return []
    if ctx.phase == "weights_oom" and not readings.others(ctx):
        return []  # every GPU of the same kind fails the same way when the weights are too large
    utilization, _ = readings.utilization(ctx)
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
    count = readings.tensor_parallel(ctx) * readings.pipeline_parallel(ctx)
    if len(usable) < count:
        return []
    chosen = [
        GpuChoice(g.index, g.name, g.free_gib, g.total_gib) for g in sorted(usable, key=lambda g: -g.free_gib)
    ]
    chosen = sorted(chosen[:count], key=lambda c: c.index)
    listed = ", ".join(
        f"GPU {c.index} ({c.name}, {gib(c.free_gib)} free of {gib(c.total_gib)})" for c in chosen
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
    if ctx.phase == "weights_oom" and not readings.others(ctx):
        return []
    if f.free_gib is None or f.total_gib is None or ctx.flag is None:
        return []
    floor = ctx.budget.min_gpu_memory_utilization if ctx.budget is not None else None
    best = max_passing_utilization(f.free_gib, f.total_gib)
    if floor is not None and (best is None or best < floor):
        # the margin would take it below what the model needs: vLLM's own check (no margin) may
        # still pass at the floor, as the budget says; anything less cannot load the model
        best = max_passing_utilization(f.free_gib, f.total_gib, margin_gib=0.0)
        if best is None or best < floor:
            return []  # only freeing memory helps
        best = floor
    if best is None:
        return []
    current, _ = readings.utilization(ctx)
    if best >= current:
        return []
    requested = best * f.total_gib
    spare = f.free_gib - requested
    why = (
        f"{gib(f.free_gib)} of {gib(f.total_gib)} is free; vLLM requests utilization × total, so "
        f"{best:.2f} requests {gib(requested)}, which leaves {gib(spare)} spare."
    )
    likelihood = 0.9
    if spare < STARTUP_MARGIN_GIB:
        why += (
            f" That is less than the {gib(STARTUP_MARGIN_GIB)} a new CUDA context may take, so it can"
            " still fail if other processes grow; freeing memory is the surer fix."
        )
        likelihood = 0.6
    if ctx.budget is not None:
        why += " The budget still leaves room for the weights and the KV cache."
    return [
        Proposal(
            change=f"{ctx.flag} {best:.2f}",
            why=why,
            source=ctx.sources_of("free_gib", "total_gib") + (("budget",) if floor is not None else ()),
            likelihood=likelihood,
        )
    ]
