"""No fix sets a value the budget says cannot work (issue #12 §3, estimator ↔ classifier): a
`--max-model-len` the budget re-run at it cannot hold, or a `--gpu-memory-utilization` above what
the startup check's free memory passes; the log's own figures still outrank the estimate."""

from __future__ import annotations

from pathlib import Path

from service.budget import estimate
from service.fixes import FixRequest, rank_fixes
from service.fixes.lookup import CatalogLookup
from service.packs.catalog import load_catalog
from service.packs.fixes import FixPack
from service.schemas import Budget, EstimateRequest, Facts, Fix

CATALOG = load_catalog(Path(__file__).resolve().parents[2] / "rules")


def _llama8b_on_l4(max_model_len: int = 131_072, free_gib: float | None = None) -> Budget:
    """Llama-3.1-8B-Instruct on one L4 (22 GiB), by default at its full 131,072 tokens: the KV cache
    holds about a quarter of that."""
    request = EstimateRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpu="L4",
        max_model_len=max_model_len,
        free_gib=free_gib,
        vllm_version="0.11.0",
    )
    return estimate(request, CATALOG)


def _changes(fixes: list[Fix], flag: str) -> list[str]:
    return [f.change for f in fixes if f.change.startswith(flag)]


def _kv_fixes(
    pack: FixPack, lookup: CatalogLookup, budget: Budget, facts: Facts, **sources: str
) -> list[Fix]:
    request = FixRequest(
        phase="kv_cache_capacity",
        facts=facts,
        budget=budget,
        engine_version="0.11.0",
        top=10,
        fact_sources=sources,
    )
    return rank_fixes(request, pack, lookup)


def test_a_max_model_len_the_budget_cannot_hold_is_not_offered(pack: FixPack, lookup: CatalogLookup) -> None:
    budget = _llama8b_on_l4()
    assert 0 < budget.max_model_len_fit < 60_000
    # an estimate of where it came from nobody knows, far above what the budget holds
    facts = Facts(
        model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072, estimated_max_model_len=100_000
    )
    assert _changes(_kv_fixes(pack, lookup, budget, facts), "--max-model-len") == []


def test_a_max_model_len_the_log_states_outranks_the_budget(pack: FixPack, lookup: CatalogLookup) -> None:
    budget = _llama8b_on_l4()
    facts = Facts(
        model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072, estimated_max_model_len=100_000
    )
    fixes = _kv_fixes(pack, lookup, budget, facts, estimated_max_model_len="line 12")
    assert _changes(fixes, "--max-model-len") == ["--max-model-len 100000"]


def test_a_max_model_len_within_the_budget_is_offered(pack: FixPack, lookup: CatalogLookup) -> None:
    budget = _llama8b_on_l4()
    fits = budget.max_model_len_fit - 1024
    facts = Facts(
        model="meta-llama/Llama-3.1-8B-Instruct", max_model_len=131_072, estimated_max_model_len=fits
    )
    assert _changes(_kv_fixes(pack, lookup, budget, facts), "--max-model-len") == [f"--max-model-len {fits}"]


def test_a_utilization_above_what_free_memory_passes_is_not_offered(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    # the budget knows 20.5 of the L4's 22.05 GiB were free at start-up (0.92 passes, 0.93 does not);
    # the KV figures ask for more than that, and the facts alone do not say what is free
    budget = _llama8b_on_l4(free_gib=20.5, max_model_len=32_768)
    ceiling = budget.startup_check.max_passing_utilization
    assert ceiling is not None and ceiling < 0.95
    facts = Facts(
        model="meta-llama/Llama-3.1-8B-Instruct",
        total_gib=budget.total_gib,
        gpu_memory_utilization=0.9,
        max_model_len=32_768,
        needed_kv_cache_gib=4.0,
        available_kv_cache_gib=2.9,
    )
    offered = _changes(_kv_fixes(pack, lookup, budget, facts), "--gpu-memory-utilization")
    assert all(float(change.split()[1]) <= ceiling for change in offered)
    # the same budget without the free memory its startup check read offers the raise
    unchecked = _llama8b_on_l4(max_model_len=32_768)
    raised = _changes(_kv_fixes(pack, lookup, unchecked, facts), "--gpu-memory-utilization")
    assert raised and float(raised[0].split()[1]) > ceiling
