"""Consistency properties: numbers in fixes agree with the facts they came from."""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.fixes import FixRequest, rank_fixes
from service.fixes.command import edit_of
from service.fixes.limits import STARTUP_MARGIN_GIB, max_passing_utilization, passes_startup
from service.packs.fixes import load_fix_recipes
from service.schemas import PHASES, Facts, Phase

PACK = load_fix_recipes(Path(__file__).resolve().parents[2] / "rules")
totals = st.sampled_from([14.58, 15.77, 22.06, 23.55, 39.39, 44.52, 79.15, 79.19, 93.1, 139.8, 178.36])


def _value(change: str, flag: str) -> float | None:
    edit = edit_of(change)
    if edit is None or edit.set_flag != flag or not edit.values:
        return None
    return float(edit.values[0])


@settings(max_examples=300, deadline=None)
@given(
    total=totals,
    free_share=st.floats(min_value=0.0, max_value=1.0),
    util=st.floats(min_value=0.05, max_value=1.0),
)
def test_recommended_utilization_passes_the_startup_check_with_the_stated_free_memory(
    total: float, free_share: float, util: float
) -> None:
    free = round(total * free_share, 2)
    requested = round(total * util, 2)
    assume(free < requested)
    facts = Facts(gpu_memory_utilization=util, free_gib=free, total_gib=total, requested_gib=requested)
    for fix in rank_fixes(
        FixRequest(phase="startup_budget", facts=facts, engine_version="0.11.0", top=10), PACK
    ):
        value = _value(fix.change, "--gpu-memory-utilization")
        if value is not None:
            assert 0 < value < util
            assert passes_startup(free, total, value)
            assert passes_startup(free - STARTUP_MARGIN_GIB, total, value)


@settings(max_examples=300, deadline=None)
@given(total=totals, free_share=st.floats(min_value=0.0, max_value=1.0))
def test_max_passing_utilization_is_the_largest_that_passes(total: float, free_share: float) -> None:
    free = total * free_share
    best = max_passing_utilization(free, total)
    if best is None:
        assert not passes_startup(free - STARTUP_MARGIN_GIB, total, 0.01)
    else:
        assert passes_startup(free - STARTUP_MARGIN_GIB, total, best)
        assert best == 1.0 or not passes_startup(free - STARTUP_MARGIN_GIB, total, round(best + 0.01, 2))


@settings(max_examples=200, deadline=None)
@given(
    configured=st.integers(min_value=256, max_value=1_048_576),
    share=st.floats(min_value=0.0, max_value=1.5),
    version=st.sampled_from(["0.8.5", "0.10.2", "0.14.0", "0.29.0", "0.33.0"]),
)
def test_recommended_max_model_len_never_exceeds_the_estimate(
    configured: int, share: float, version: str
) -> None:
    estimate = int(configured * share)
    facts = Facts(max_model_len=configured, estimated_max_model_len=estimate, available_kv_cache_gib=1.0)
    fixes = rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=facts, engine_version=version, top=10), PACK
    )
    for fix in fixes:
        value = _value(fix.change, "--max-model-len")
        if value is not None:
            assert 0 < value <= estimate < configured


@settings(max_examples=200, deadline=None)
@given(
    total=totals,
    util=st.floats(min_value=0.3, max_value=0.95),
    free_share=st.floats(min_value=0.3, max_value=1.0),
    need=st.floats(min_value=0.01, max_value=40.0),
    have=st.floats(min_value=0.0, max_value=40.0),
)
def test_raised_utilization_for_the_kv_cache_still_passes_startup(
    total: float, util: float, free_share: float, need: float, have: float
) -> None:
    assume(have < need)
    free = round(total * free_share, 2)
    facts = Facts(
        gpu_memory_utilization=util,
        total_gib=total,
        free_gib=free,
        needed_kv_cache_gib=need,
        available_kv_cache_gib=have,
    )
    for fix in rank_fixes(
        FixRequest(phase="kv_cache_capacity", facts=facts, engine_version="0.29.0", top=10), PACK
    ):
        value = _value(fix.change, "--gpu-memory-utilization")
        if value is not None:
            assert value > util
            assert passes_startup(free, total, value)
            # and it covers what one request lacked
            assert (value - util) * total >= need - have


gib_values = st.one_of(st.none(), st.floats(min_value=-1.0, max_value=300.0, allow_nan=False))
counts = st.one_of(st.none(), st.integers(min_value=-1, max_value=2_000_000))
hostile_facts = st.builds(
    Facts,
    gpu_memory_utilization=st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0)),
    free_gib=gib_values,
    total_gib=gib_values,
    requested_gib=gib_values,
    tried_to_allocate_gib=gib_values,
    model_weights_gib=gib_values,
    available_kv_cache_gib=gib_values,
    needed_kv_cache_gib=gib_values,
    max_model_len=counts,
    max_num_seqs=counts,
    max_num_batched_tokens=counts,
    estimated_max_model_len=counts,
    kv_cache_tokens=counts,
    num_gpu_blocks=counts,
    requested_tokens=counts,
    context_limit=counts,
    block_size=st.one_of(st.none(), st.integers(min_value=0, max_value=512)),
    num_attention_heads=st.one_of(st.none(), st.integers(min_value=0, max_value=256)),
    tensor_parallel_size=st.one_of(st.none(), st.integers(min_value=0, max_value=16)),
    compute_capability=st.one_of(st.none(), st.sampled_from(["7.0", "8.0", "8.9", "9.0", "12.1", "x", ""])),
)


@settings(max_examples=400, deadline=None)
@given(
    facts=hostile_facts,
    phase=st.sampled_from(PHASES),
    version=st.sampled_from([None, "0.6.3", "0.11.0", "0.33.0"]),
)
def test_ranking_never_crashes_on_odd_facts(facts: Facts, phase: Phase, version: str | None) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase=phase, facts=facts, engine_version=version, command="vllm serve m -tp 0 --max-num-seqs x"
        ),
        PACK,
    )
    assert len(fixes) <= 5
    assert all(fix.change and fix.why for fix in fixes)
