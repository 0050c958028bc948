"""Calculators for OOM during warm-up (graphs, sampler) and the knobs shared with serving.

`--disable-cuda-graphs` never existed in vLLM; `--enforce-eager` is the flag.
"""

from __future__ import annotations

from service.fixes.calculators import readings
from service.fixes.calculators.readings import gib, tokens
from service.fixes.context import FixContext, Proposal
from service.fixes.limits import (
    round_down,
)

_CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64)
_OOM_MARGIN_GIB = 0.5


def _eager(ctx: FixContext) -> bool:
    return bool(ctx.facts.enforce_eager) or (ctx.command is not None and ctx.command.has("--enforce-eager"))


def _profile_run(ctx: FixContext) -> bool:
    """The warm-up OOM hit the profile run's dummy batch (not graph capture or the sampler)."""
    if _sampler_warmup(ctx):
        return False
    return _eager(ctx) or any("profile_run" in line or "_dummy_run(" in line for line in ctx.lines)


def _sampler_warmup(ctx: FixContext) -> bool:
    """An OOM in the sampler (or pooler) warm-up, by rule id, finding or the log line itself."""
    texts = [x.rule + " " + (x.message or "") for x in ctx.findings] + list(ctx.lines)
    return any("sampler" in text.lower() or "warming up pooler" in text.lower() for text in texts)


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
    seqs, _ = readings.int_flag(ctx, ctx.facts.max_num_seqs, "--max-num-seqs")
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
    current, origin = readings.int_flag(ctx, ctx.facts.max_num_seqs, "--max-num-seqs")
    source = ctx.source("max_num_seqs") if origin == "fact" else origin
    total, _ = readings.total_gib(ctx)
    if current is None:
        current = readings.scheduler_default(ctx, "max_num_seqs", total)
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
    """Halve `--max-num-batched-tokens`: the prefill chunk (and the profile run's dummy batch) sets
    the activation peak."""
    if ctx.flag is None or (ctx.phase == "warmup_oom" and not _profile_run(ctx)):
        return []
    f = ctx.facts
    current, origin = readings.int_flag(ctx, f.max_num_batched_tokens, "--max-num-batched-tokens")
    source = ctx.source("max_num_batched_tokens") if origin == "fact" else origin
    total, _ = readings.total_gib(ctx)
    if current is None:
        current = readings.scheduler_default(ctx, "max_num_batched_tokens", total)
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
    seqs, _ = readings.int_flag(ctx, f.max_num_seqs, "--max-num-seqs")
    new = max(current // 2, seqs or 1)
    if new >= current:
        return []
    why = (
        f"From {tokens(current)} to {tokens(new)} tokens per step lowers the activation "
        "peak; change it apart from --max-num-seqs."
    )
    likelihood = 0.5 if ctx.phase == "kv_preemption" else 0.8
    return [Proposal(change=f"{ctx.flag} {new}", why=why, source=(source,), likelihood=likelihood)]


def graph_headroom(ctx: FixContext) -> list[Proposal]:
    """Room outside the budget for CUDA graphs, which vLLM before 0.20 does not count in it."""
    if _eager(ctx):
        return []
    graphs = ctx.budget.cuda_graph_gib if ctx.budget is not None else 0.0
    return lower_by_shortfall(
        ctx, graphs, "CUDA graphs", " This vLLM version does not count graph memory in its budget."
    )


def activation_headroom(ctx: FixContext) -> list[Proposal]:
    """Room outside the budget for activations beyond the profiled peak (serving, or an eager warm-up)."""
    if ctx.phase == "warmup_oom" and not _eager(ctx):
        return []  # with graphs on, leave-room-for-cuda-graphs says it better
    return lower_by_shortfall(ctx, 0.0, "activations outside the profiled peak", "")


def lower_by_shortfall(ctx: FixContext, estimate: float, what: str, note: str) -> list[Proposal]:
    """Lower utilization by what the failed allocation lacked (or the budget's estimate, if larger)."""
    f = ctx.facts
    total, total_source = readings.total_gib(ctx)
    if ctx.flag is None or total is None:
        return []
    current, current_source = readings.utilization(ctx)
    lacking = 0.0
    sources: list[str] = [current_source, total_source]
    if f.tried_to_allocate_gib is not None and f.free_gib is not None:
        lacking = max(0.0, f.tried_to_allocate_gib - f.free_gib)
        sources += ctx.sources_of("tried_to_allocate_gib")
    if estimate > lacking:
        lacking = estimate
        sources.append("budget")
    if lacking <= 0 and f.tried_to_allocate_gib is None:
        return []
    target = round_down(current - (lacking + _OOM_MARGIN_GIB) / total)
    if target <= 0.05:
        return []
    why = (
        f"The failed allocation lacked {gib(lacking)}; {target:.2f} leaves "
        f"{gib((current - target) * total)} outside vLLM's budget for {what}.{note}"
    )
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
