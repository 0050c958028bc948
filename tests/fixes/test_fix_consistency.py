"""Consistency properties: numbers in fixes agree with the facts they came from."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.fixes import rank_fixes
from service.fixes.command import edit_of
from service.fixes.limits import STARTUP_MARGIN_GIB, max_passing_utilization, passes_startup
from service.packs.fixes import FixPack
from service.schemas import Facts

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
    pack: FixPack, total: float, free_share: float, util: float
) -> None:
    free = round(total * free_share, 2)
    requested = round(total * util, 2)
    assume(free < requested)
    facts = Facts(gpu_memory_utilization=util, free_gib=free, total_gib=total, requested_gib=requested)
    for fix in rank_fixes("startup_budget", facts, [], None, None, "0.11.0", pack, top=10):
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
    pack: FixPack, configured: int, share: float, version: str
) -> None:
    estimate = int(configured * share)
    facts = Facts(max_model_len=configured, estimated_max_model_len=estimate, available_kv_cache_gib=1.0)
    fixes = rank_fixes("kv_cache_capacity", facts, [], None, None, version, pack, top=10)
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
    pack: FixPack, total: float, util: float, free_share: float, need: float, have: float
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
    for fix in rank_fixes("kv_cache_capacity", facts, [], None, None, "0.29.0", pack, top=10):
        value = _value(fix.change, "--gpu-memory-utilization")
        if value is not None:
            assert value > util
            assert passes_startup(free, total, value)
            # and it covers what one request lacked
            assert (value - util) * total >= need - have
