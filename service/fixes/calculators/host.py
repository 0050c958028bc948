"""Calculators for host_oom: the host ran out of RAM (CPU memory), not the GPU.

vLLM's V0 engine pins `--swap-space` GiB of host memory per GPU of the node (refused above 70% of
the host's RAM, warned above 40%: `CacheConfig.verify_with_parallel_config`, until 0.17);
`--cpu-offload-gb` keeps that many GiB of weights per GPU in host RAM; V0 executors can load the
workers' shards a few at a time (`--max-parallel-loading-workers`). Everything else is the
container's or the node's memory limit.
"""

from __future__ import annotations

import math

from service.fixes.calculators import readings
from service.fixes.calculators.readings import gib
from service.fixes.context import FixContext, Proposal

# vLLM warns above this share of the host's RAM for the swap space of all GPUs (config/cache.py).
_SWAP_WARN_SHARE = 0.4
_DEFAULT_SWAP_GIB = 4.0
# How well a knob fits a host OOM in the other stage: the swap space is pinned when the KV cache is
# allocated (after the weights loaded); offloaded weights are copied to host RAM while loading.
_OTHER_STAGE = 0.35


def _weights_loaded(ctx: FixContext) -> bool:
    """Whether the log shows the weights finished loading (their size, or the KV cache sized after
    them), so the host ran out later: when the swap space or serving buffers were allocated."""
    facts = ctx.facts
    stated = (
        facts.model_weights_gib,
        facts.num_gpu_blocks,
        facts.available_kv_cache_gib,
        facts.kv_cache_tokens,
    )
    return any(value is not None for value in stated)


def _float_flag(ctx: FixContext, flag: str) -> float | None:
    value = ctx.command.value(flag) if ctx.command is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def lower_swap_space(ctx: FixContext) -> list[Proposal]:
    """A swap space per GPU that keeps all GPUs' swap under 40% of the host's RAM."""
    if ctx.flag is None:
        return []
    gpus = readings.tensor_parallel(ctx)
    total = ctx.facts.host_total_gib
    if total is None:
        why = (
            f"Each GPU's worker pins --swap-space GiB of host RAM ({_DEFAULT_SWAP_GIB:g} GiB by default), "
            f"{gpus} at once here; a smaller swap space frees it."
        )
        likelihood = 1.0 if _weights_loaded(ctx) or gpus < 2 else _OTHER_STAGE
        return [
            Proposal(
                change=f"{ctx.flag} 1", why=why, exact=False, needs=("host_total_gib",), likelihood=likelihood
            )
        ]
    per_gpu = math.floor(_SWAP_WARN_SHARE * total / gpus)
    current = ctx.facts.swap_space_gib
    if current is not None and per_gpu * gpus >= current:
        return []
    why = (
        f"vLLM pins the swap space of all {gpus} GPU(s) in host RAM: {per_gpu} GiB each is "
        f"{gib(per_gpu * gpus)} of the host's {gib(total)}, under the 40% vLLM warns at"
    )
    if current is not None:
        why += f" (it asked for {gib(current)})"
    source = ctx.sources_of("host_total_gib", "swap_space_gib")
    return [Proposal(change=f"{ctx.flag} {per_gpu}", why=why + ".", source=source)]


def lower_cpu_offload(ctx: FixContext) -> list[Proposal]:
    """Offload fewer GiB of weights to host RAM, when the command offloads any."""
    offload = _float_flag(ctx, "--cpu-offload-gb")
    if ctx.flag is None or offload is None or offload <= 0:
        return []
    gpus = readings.tensor_parallel(ctx)
    lower = math.floor(offload / 2)
    why = (
        f"--cpu-offload-gb {offload:g} keeps {gib(offload * gpus)} of weights in host RAM across "
        f"{gpus} GPU(s); offloading less needs less RAM (and more GPU memory)."
    )
    likelihood = _OTHER_STAGE if _weights_loaded(ctx) else 1.0
    return [
        Proposal(
            change=f"{ctx.flag} {lower}", why=why, exact=False, source=("command",), likelihood=likelihood
        )
    ]


def raise_host_memory(ctx: FixContext) -> list[Proposal]:
    """Give the container or node more RAM; the size only where the log states the host's RAM."""
    total = ctx.facts.host_total_gib
    if total is not None:
        change = f"raise the container's memory limit above {gib(total)}"
        why = f"The host had {gib(total)} of RAM and vLLM needed more."
        return [Proposal(change=change, why=why, source=ctx.sources_of("host_total_gib"))]
    why = (
        "The kernel's OOM killer, the container runtime or Ray stopped vLLM for lack of host RAM; "
        "loading weights reads them through host memory first."
    )
    return [Proposal(change="raise the container's memory limit", why=why, exact=False)]


def fewer_loading_workers(ctx: FixContext) -> list[Proposal]:
    """Load one worker's shards at a time (V0 executors), when several GPUs load at once."""
    gpus = readings.tensor_parallel(ctx) * readings.pipeline_parallel(ctx)
    if ctx.flag is None or gpus < 2 or ctx.facts.swap_space_gib is not None:
        return []  # a refused swap space fails before any weight loads
    if _weights_loaded(ctx):
        return []  # the weights were in: the host ran out after loading
    why = (
        f"{gpus} workers read their shards into host RAM at the same time; one at a time "
        "lowers the peak to one worker's share."
    )
    return [Proposal(change=f"{ctx.flag} 1", why=why, likelihood=0.8)]
