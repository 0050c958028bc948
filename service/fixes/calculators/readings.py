"""Readings of the facts that several calculators share: the utilization in force, the GPU's total,
the parallel sizes, the other processes on the GPU, the model's weights. Each returns where the
value came from, so a fix can cite it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from service import budget
from service.fixes.context import FixContext
from service.processes import failing_process
from service.schemas import Finding, OtherProcess
from service.versions import NEWEST

__all__ = [
    "STARTUP_PHASES",
    "compute_capability",
    "describe_process",
    "gib",
    "heads",
    "int_flag",
    "no_cache_blocks",
    "others",
    "per_gpu_reserve",
    "pipeline_parallel",
    "said_text",
    "scheduler_default",
    "tensor_parallel",
    "tokens",
    "total_gib",
    "utilization",
    "version_text",
    "weights_total",
]

# phases that end before vLLM serves: its own memory is gone when a snapshot is taken afterwards
STARTUP_PHASES = frozenset(
    {"startup_budget", "weights_oom", "kv_cache_capacity", "warmup_oom", "profiling_inconsistent"}
)


def gib(value: float) -> str:
    return f"{value:.2f} GiB"


def tokens(value: int) -> str:
    return f"{value:,}"


def utilization(ctx: FixContext) -> tuple[float, str]:
    """The utilization in force and where it came from (the fact, the budget, or the version default)."""
    if ctx.facts.gpu_memory_utilization is not None:
        return ctx.facts.gpu_memory_utilization, ctx.source("gpu_memory_utilization")
    if ctx.budget is not None:
        return ctx.budget.gpu_memory_utilization, "budget"
    return min(budget.default_utilization(ctx.pack.engine, v or NEWEST) for v in ctx.span), "default"


def scheduler_default(ctx: FixContext, name: str, total: float | None) -> int | None:
    """`max_num_seqs` or `max_num_batched_tokens` as `vllm serve` defaults it (engines.yaml), when
    every version in the span agrees; None when they differ or the GPU is not known well enough."""
    index = ("max_num_seqs", "max_num_batched_tokens").index(name)
    values = set()
    for v in ctx.span:
        pair = budget.scheduler_defaults(ctx.pack.engine, v or NEWEST, ctx.facts.gpu_name, total)
        values.add(pair[index] if pair is not None else None)
    return values.pop() if len(values) == 1 else None


def version_text(ctx: FixContext) -> str:
    """The user's vLLM version as a person would write it (a range when only that is known)."""
    known = [v for v in ctx.span if v is not None]
    if not known:
        return "current releases"
    if len(known) == 1 and len(ctx.span) == 1:
        return "vLLM " + ".".join(map(str, known[0]))
    return "vLLM " + " to ".join(f"{v[0]}.{v[1]}" + ("" if v[2] == 999 else f".{v[2]}") for v in known)


def total_gib(ctx: FixContext) -> tuple[float | None, str]:
    if ctx.facts.total_gib is not None:
        return ctx.facts.total_gib, ctx.source("total_gib")
    if ctx.budget is not None:
        return ctx.budget.total_gib, "budget"
    return None, ""


def tensor_parallel(ctx: FixContext) -> int:
    if ctx.facts.tensor_parallel_size is not None:
        return ctx.facts.tensor_parallel_size
    if ctx.command is not None and (value := ctx.command.value("--tensor-parallel-size")):
        return max(1, int(value)) if value.isdigit() else 1
    return ctx.budget.tensor_parallel_size if ctx.budget is not None else 1


def pipeline_parallel(ctx: FixContext) -> int:
    if ctx.facts.pipeline_parallel_size is not None:
        return ctx.facts.pipeline_parallel_size
    return ctx.budget.pipeline_parallel_size if ctx.budget is not None else 1


def heads(ctx: FixContext) -> int | None:
    return ctx.facts.num_attention_heads


def others(ctx: FixContext) -> list[tuple[int, float, str | None]]:
    """Other processes holding memory on vLLM's GPU: (pid, GiB, name), largest first."""
    found: list[tuple[int, float, str | None]] = []
    if ctx.facts.other_processes:
        found = [(p.pid, p.used_gib, None) for p in ctx.facts.other_processes]
        found = [p for p in found if p[0] != _vllm_itself(ctx, found)]
    elif ctx.gpu is not None and ctx.phase in STARTUP_PHASES:
        found = [(p.pid, p.used_gib or 0.0, p.name) for p in ctx.gpu.processes]
    return sorted((p for p in found if p[1] > 0), key=lambda p: -p[1])


def _vllm_itself(ctx: FixContext, found: list[tuple[int, float, str | None]]) -> int | None:
    """The PID in a torch OOM's process list that is vLLM's own worker, if one is (service.processes:
    in containers it is listed as "Process N has …" like any other)."""
    f = ctx.facts
    listed = [OtherProcess(pid=pid, used_gib=used) for pid, used, _ in found]
    own = failing_process(
        listed, f.torch_allocated_gib, f.torch_reserved_unallocated_gib, f.process_in_use_gib
    )
    return own.pid if own is not None else None


def describe_process(pid: int, used_gib: float, name: str | None) -> str:
    label = f"{name}, " if name else ""
    return f"PID {pid} ({label}{gib(used_gib)})"


def int_flag(ctx: FixContext, fact: int | None, flag: str) -> tuple[int | None, str]:
    if fact is not None:
        return fact, "fact"
    if ctx.command is not None and (value := ctx.command.value(flag)) and value.isdigit() and int(value) > 0:
        return int(value), "command"
    return None, ""


def weights_total(ctx: FixContext) -> tuple[float | None, str]:
    """All of the model's weights across GPUs, from the budget or the logged per-GPU figure."""
    split = tensor_parallel(ctx) * pipeline_parallel(ctx)
    if ctx.budget is not None:
        return (
            ctx.budget.weights_gib * ctx.budget.tensor_parallel_size * ctx.budget.pipeline_parallel_size,
            "budget",
        )
    if ctx.facts.model_weights_gib is not None:
        return ctx.facts.model_weights_gib * split, ctx.source("model_weights_gib")
    return None, ""


def compute_capability(ctx: FixContext) -> tuple[int, int] | None:
    text = ctx.facts.compute_capability
    if text is None and ctx.gpu is not None:
        text = ctx.gpu.compute_capability
    name = ctx.facts.gpu_name or (ctx.budget.gpu if ctx.budget is not None else None)
    if text is None and name and ctx.catalog is not None:
        text = ctx.catalog.gpu_compute_capability(name)  # a named GPU's, e.g. the request's hint
    if text is None:
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", text) or re.match(r"^\s*(\d)(\d)\s*$", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def per_gpu_reserve(ctx: FixContext) -> float:
    """Memory besides weights a GPU needs before any KV cache: activations, non-torch, graphs."""
    if ctx.budget is None:
        return 0.0
    b = ctx.budget
    return b.activation_peak_gib + b.non_torch_gib + b.cuda_graph_gib


def said_text(findings: Sequence[Finding], lines: Sequence[str]) -> str:
    """The rules that fired, and the decisive lines (also retold in words) lower-cased, one per
    line: no marker `no_cache_blocks` looks for holds a line break, so none is found across two."""
    return "\n".join(x.rule for x in findings) + "\n" + "\n".join(lines).lower()


def no_cache_blocks(ctx: FixContext) -> bool:
    """vLLM found no memory at all for KV-cache blocks ("No available memory for the cache blocks")."""
    f = ctx.facts
    if f.num_gpu_blocks == 0 or (f.available_kv_cache_gib is not None and f.available_kv_cache_gib <= 0):
        return True
    texts = ctx.said if ctx.said is not None else said_text(ctx.findings, ctx.lines)
    markers = ("no-cache-blocks", "no-blocks", "no available memory for the cache blocks", "gpu blocks: -1")
    return any(marker in texts for marker in markers)
