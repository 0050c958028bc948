"""Inverse searches: the smallest utilization and the smallest tensor-parallel size that fit.

Each search re-runs the stage arithmetic (`service.budget.stages`) for candidate values, so its
answer holds by the same formula the budget itself uses.
"""

from __future__ import annotations

import math

from service.budget.inputs import Run
from service.budget.parallel import valid_tensor_parallel_sizes
from service.budget.stages import Stage, null_block_bytes, requested_bytes, stage_budgets
from service.packs.catalog import Catalog

__all__ = ["min_tensor_parallel", "min_utilization"]


def min_utilization(run: Run, stage: Stage, catalog: Catalog) -> float | None:
    """The smallest utilization (2 decimals) whose KV budget holds one max_model_len request.

    None when kv_cache_memory_bytes is set (vLLM then ignores the utilization) or nothing fits.
    """
    if run.kv_cache_memory_bytes is not None:
        return None
    need = stage.layout.need_bytes(run.max_model_len) + null_block_bytes(run, stage.layout, catalog)
    util = math.ceil((stage.fixed + need) / run.total_bytes * 100) / 100
    while util <= 1.0 and requested_bytes(run, util, catalog) - stage.fixed < max(need, 1):
        util = round(util + 0.01, 2)
    return util if util <= 1.0 else None


def min_tensor_parallel(run: Run, requested: int, catalog: Catalog) -> int | None:
    """The smallest TP vLLM accepts for this model whose GPUs hold weights and one request."""
    sizes = valid_tensor_parallel_sizes(
        run.model, catalog.engine, run.quant, run.quant_scope, dp=run.dp, expert_parallel=run.expert_parallel
    )
    for tp in sizes:
        if all(_fits_without_override(run, s, requested, catalog) for s in stage_budgets(run, tp, catalog)):
            return tp
    return None


def _fits_without_override(run: Run, stage: Stage, requested: int, catalog: Catalog) -> bool:
    need = stage.layout.need_bytes(run.max_model_len) + null_block_bytes(run, stage.layout, catalog)
    return requested - stage.fixed >= max(need, 1)
