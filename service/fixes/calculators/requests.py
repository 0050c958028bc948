"""Calculators for requests the API rejects as too long."""

from __future__ import annotations

from service.fixes.calculators.readings import tokens
from service.fixes.context import FixContext, Proposal
from service.fixes.limits import (
    round_up,
)


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
        f"The request totals {tokens(f.requested_tokens)} tokens, {tokens(excess)} over "
        f"the {tokens(f.context_limit)}-token limit."
    )
    return [
        Proposal(
            change=f"lower max_tokens in the request by at least {tokens(excess)}",
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
        f"The KV cache holds one request of up to {tokens(capacity)} tokens, so "
        f"{tokens(target_len)} fits this request."
    )
    return [Proposal(change=f"{ctx.flag} {target_len}", why=why, source=(source,), likelihood=0.6)]
