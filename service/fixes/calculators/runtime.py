"""Calculators that are actions while serving: cap requests, watch the KV metrics."""

from __future__ import annotations

from service.fixes.calculators import readings
from service.fixes.calculators.readings import tokens
from service.fixes.context import FixContext, Proposal


def cap_request_length(ctx: FixContext) -> list[Proposal]:
    """Cap prompt + max_tokens so every running sequence fits the KV cache at once."""
    f = ctx.facts
    seqs, _ = readings.int_flag(ctx, f.max_num_seqs, "--max-num-seqs")
    if f.kv_cache_tokens is not None and seqs:
        share = f.kv_cache_tokens // seqs
        why = (
            f"The KV cache holds {tokens(f.kv_cache_tokens)} tokens, {tokens(share)} per sequence when "
            f"{seqs} run at once; longer requests force preemption."
        )
        return [
            Proposal(
                change=f"cap prompt + max_tokens at {tokens(share)} tokens per request in the clients",
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
    renamed = [v is None or v >= (0, 9, 2) for v in ctx.span]
    if all(renamed):
        usage = "vllm:kv_cache_usage_perc"
    elif not any(renamed):
        usage = "vllm:gpu_cache_usage_perc"
    else:
        usage = "vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before 0.9.2)"
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
