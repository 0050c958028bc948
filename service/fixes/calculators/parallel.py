"""The tensor-parallel size a fix names: one vLLM accepts, checked by re-running the budget.

A size is offered as enough on its own only when the budget, re-run at that size, holds one request
of the configured max_model_len. When the GPUs present (or, unknown, one 8-GPU node) cannot reach
that size, the plan pairs the largest size they allow with the longest max_model_len the re-run
holds there, and says which size would hold the full length.
"""

from __future__ import annotations

import msgspec

from service.fixes.calculators import readings
from service.fixes.context import FixContext
from service.fixes.limits import divisors
from service.schemas import Budget

__all__ = ["TensorParallelPlan", "accepted_sizes", "plan_tensor_parallel"]

# Without a GPU count, combinations are searched within one node: the usual 8-GPU server.
_NODE_GPUS = 8
# A shortened max_model_len is re-checked this many times, each at the re-run's own fit.
_LENGTH_TRIES = 4


class TensorParallelPlan(msgspec.Struct, frozen=True):
    """A TP size to set, with a shorter max_model_len when that size alone does not hold the request."""

    tp: int
    max_model_len: int | None = None
    rerun: Budget | None = None
    holding_tp: int | None = None  # the smallest size that holds the full length, if not `tp`

    @property
    def enough_alone(self) -> bool:
        return self.max_model_len is None and self.rerun is not None and self.rerun.fits


def _model(ctx: FixContext) -> str | None:
    return ctx.facts.model or (ctx.budget.model if ctx.budget is not None else None)


def accepted_sizes(ctx: FixContext) -> tuple[list[int], str] | None:
    """TP sizes vLLM accepts for this model, and where the rule came from (catalog or heads)."""
    model = _model(ctx)
    if ctx.catalog is not None and model:
        quant = ctx.budget.quantization if ctx.budget is not None else None
        sizes = ctx.catalog.tensor_parallel_sizes(model, quant)
        if sizes is not None:
            return sizes, "catalog"
    heads = readings.heads(ctx)
    if heads is None:
        return None
    return divisors(heads), ctx.source("num_attention_heads")


def _rerun(ctx: FixContext, tp: int, max_model_len: int | None = None) -> Budget | None:
    if ctx.catalog is None or ctx.budget is None:
        return None
    return ctx.catalog.reestimate(ctx.budget, tensor_parallel_size=tp, max_model_len=max_model_len)


def _shortened(ctx: FixContext, tp: int, first: Budget) -> tuple[int, Budget] | None:
    """The longest max_model_len that the re-run at `tp` holds, confirmed by re-running at it."""
    length, rerun = first.max_model_len_fit, first
    for _ in range(_LENGTH_TRIES):
        if length <= 0:
            return None
        confirmed = _rerun(ctx, tp, length)
        if confirmed is None:
            return None
        if confirmed.fits:
            return length, confirmed
        length, rerun = min(confirmed.max_model_len_fit, length - rerun.block_size), confirmed
    return None


def plan_tensor_parallel(ctx: FixContext, current: int) -> TensorParallelPlan | None:
    """The smallest accepted size above `current` that holds the request, or the best combination."""
    found = accepted_sizes(ctx)
    if found is None:
        return None
    larger = [tp for tp in found[0] if tp > current]
    limit = ctx.gpus_present
    reach = limit if limit is not None else _NODE_GPUS
    within = [tp for tp in larger if tp <= reach]
    if ctx.catalog is None or ctx.budget is None:
        reachable = [tp for tp in larger if limit is None or tp <= limit]
        return TensorParallelPlan(reachable[0]) if reachable else None
    holding: tuple[int, Budget] | None = None
    for tp in larger:
        rerun = _rerun(ctx, tp)
        if rerun is not None and rerun.fits:
            holding = (tp, rerun)
            break
    if holding is not None and holding[0] <= reach:
        return TensorParallelPlan(holding[0], rerun=holding[1])
    holding_tp = holding[0] if holding is not None else None
    for tp in reversed(within):
        rerun = _rerun(ctx, tp)
        if rerun is None or rerun.max_model_len_fit <= 0:
            continue
        shortened = _shortened(ctx, tp, rerun)
        if shortened is not None:
            return TensorParallelPlan(tp, shortened[0], shortened[1], holding_tp)
    if holding is not None:
        return TensorParallelPlan(holding[0], rerun=holding[1])
    return None
