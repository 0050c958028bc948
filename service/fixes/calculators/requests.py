"""Calculators for requests the API rejects as too long."""

from __future__ import annotations

from service.first_use import first_use_re
from service.fixes.calculators.readings import tokens
from service.fixes.context import FixContext, Proposal
from service.fixes.limits import round_up

# the prompt's own length in vLLM's request-too-long messages, by era (fact sheet §5 #11-#15)
_PROMPT = first_use_re(
    r"prompt contains (?:at least )?(\d+) input tokens"
    r"|\((\d+) in the messages"
    r"|your request has (\d+) input tokens"
    r"|you requested (\d+) tokens in the messages"
    r"|prompt \(length (\d+)\)"
)


def _prompt_tokens(ctx: FixContext) -> int | None:
    for line in ctx.lines:
        if match := _PROMPT.search(line):
            return int(next(group for group in match.groups() if group))
    return None


def fit_max_tokens(ctx: FixContext) -> list[Proposal]:
    """The largest max_tokens that fits: the context limit minus the prompt (or less by the excess)."""
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
    sources = ctx.sources_of("requested_tokens", "context_limit")
    prompt = _prompt_tokens(ctx)
    if prompt is not None:
        room = f.context_limit - prompt
        if room < 1:
            return []  # the prompt alone is too long: no max_tokens helps
        why = f"The prompt is {tokens(prompt)} tokens of the {tokens(f.context_limit)}-token context."
        return [
            Proposal(
                change=f"set max_tokens to at most {tokens(room)}", why=why, source=sources, likelihood=0.95
            )
        ]
    excess = f.requested_tokens - f.context_limit
    if excess <= 0:
        return []
    why = (
        f"The request totals {tokens(f.requested_tokens)} tokens, {tokens(excess)} over "
        f"the {tokens(f.context_limit)}-token limit. If the prompt alone exceeds it, "
        "shorten the prompt instead."
    )
    return [
        Proposal(
            change=f"lower max_tokens in the request by at least {tokens(excess)}",
            why=why,
            source=sources,
            likelihood=0.8,
        )
    ]


def shorten_prompt(ctx: FixContext) -> list[Proposal]:
    """When the prompt alone fills the context: shorten it by the excess plus room for an answer."""
    f = ctx.facts
    prompt = _prompt_tokens(ctx)
    if prompt is None or f.context_limit is None or prompt < f.context_limit:
        return []
    excess = prompt - f.context_limit + 1
    why = (
        f"The prompt alone is {tokens(prompt)} tokens and the context holds {tokens(f.context_limit)}, "
        "so no max_tokens setting can help; shorten it further to leave room for the answer."
    )
    return [
        Proposal(
            change=f"shorten the prompt by at least {tokens(excess)} tokens",
            why=why,
            source=ctx.sources_of("context_limit"),
            likelihood=0.9,
        )
    ]


def _capacity(ctx: FixContext, target: int) -> tuple[bool, str, str] | None:
    """Whether one request of `target` tokens fits the KV cache: (fits, what says so, its source)."""
    f = ctx.facts
    if ctx.catalog is not None and ctx.budget is not None:
        rerun = ctx.catalog.reestimate(ctx.budget, max_model_len=target)
        if rerun is not None:
            return rerun.fits, f"the budget re-run at {tokens(target)} tokens fits", "budget"
    if ctx.budget is not None and ctx.budget.max_model_len >= target:
        # the budget's fit is searched up to its own max_model_len, so it answers for shorter targets
        fit = ctx.budget.max_model_len_fit
        return fit >= target, f"the budget holds one request of {tokens(fit)} tokens", "budget"
    if f.kv_cache_tokens is not None:
        usable = f.kv_cache_tokens - (f.block_size or 16)
        holds = f"the KV cache holds {tokens(usable)} tokens"
        return target <= usable, holds, ctx.source("kv_cache_tokens")
    return None


def raise_max_model_len(ctx: FixContext) -> list[Proposal]:
    """A larger `--max-model-len` for the request, only when the KV cache (or the budget) holds it."""
    f = ctx.facts
    total = _prompt_tokens(ctx) or f.requested_tokens
    if ctx.flag is None or total is None:
        return []
    limit = f.context_limit or f.max_model_len
    target = int(round_up(total + (0 if f.requested_tokens and f.requested_tokens > total else 1), 256))
    if limit is not None and target <= limit:
        return []
    model = f.model or (ctx.budget.model if ctx.budget is not None else None)
    native = ctx.catalog.max_context(model) if ctx.catalog is not None and model else None
    if native is not None and target > native:
        return []
    capacity = _capacity(ctx, target)
    if capacity is None or not capacity[0]:
        return []
    _, says, source = capacity
    why = f"{tokens(target)} covers this request and {says}."
    if native is not None:
        why += f" The model was trained for {tokens(native)}."
    return [Proposal(change=f"{ctx.flag} {target}", why=why, source=(source,), likelihood=0.6)]
