"""The version gate: no fix ever recommends a flag the user's vLLM version does not have."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.fixes import FixRequest, rank_fixes
from service.fixes.command import edit_of
from service.packs.fixes import load_fix_recipes
from service.schemas import PHASES, Facts, Finding, OtherProcess, Phase
from service.versions import flag_exists, parse_span, parse_version

RICH = Facts(
    gpu_name="NVIDIA H100 80GB HBM3",
    gpu_memory_utilization=0.9,
    max_model_len=32_768,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    free_gib=60.0,
    total_gib=79.19,
    requested_gib=71.27,
    tried_to_allocate_gib=2.0,
    other_processes=[OtherProcess(pid=77, used_gib=12.0)],
    model_weights_gib=14.99,
    available_kv_cache_gib=1.5,
    kv_cache_tokens=12_288,
    estimated_max_model_len=12_000,
    needed_kv_cache_gib=4.0,
    requested_tokens=40_000,
    context_limit=32_768,
    num_attention_heads=32,
    tensor_parallel_size=3,
    compute_capability="9.0",
)
SAMPLER = Finding(rule="vllm-sampler-warmup-oom", phase="warmup_oom", severity="error", line=9)
COMMAND = (
    "vllm serve m --swap-space 4 --disable-cuda-graphs --kv-cache-memory-bytes 1000000 "
    "--cudagraph-capture-sizes 1 2 --cuda-graph-sizes 8 --preemption-mode swap"
)

PACK = load_fix_recipes(Path(__file__).resolve().parents[2] / "rules")
versions = st.builds(
    lambda minor, patch: f"0.{minor}.{patch}", st.integers(min_value=3, max_value=33), st.integers(0, 3)
)


def _release(version: str) -> tuple[int, int, int]:
    parsed = parse_version(version)
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.10.2", (0, 10, 2)),
        ("v0.29.1", (0, 29, 1)),
        ("0.12.0rc1", (0, 12, 0)),
        ("0.11", (0, 11, 0)),
        ("0.8.5.post1", (0, 8, 5)),
        ("0.11.1.dev42+g1234abc", (0, 11, 1)),
        ("v0.10.1.1", (0, 10, 1)),
        ("dev", None),
        ("0.10.2 and up", None),
    ],
)
def test_version_strings_parse_to_their_release(text: str, expected: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == expected


def test_an_unknown_version_never_gets_a_removed_flag() -> None:
    assert not flag_exists(None, (0, 2, 7), (0, 18, 0))
    assert flag_exists(None, (0, 10, 2), None)


@settings(max_examples=150, deadline=None)
@given(version=versions, phase=st.sampled_from(PHASES))
def test_no_fix_sets_a_flag_absent_from_the_stated_version(version: str, phase: Phase) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase=phase, facts=RICH, findings=[SAMPLER], engine_version=version, command=COMMAND, top=20
        ),
        PACK,
    )
    parsed = parse_version(version)
    for fix in fixes:
        edit = edit_of(fix.change)
        if edit is not None and edit.set_flag is not None:
            spec = PACK.flag(edit.set_flag)
            assert spec is not None and spec.exists(parsed), (version, fix.change)
        assert "--disable-cuda-graph" not in fix.change.split(" instead of ")[0]


@settings(max_examples=60, deadline=None)
@given(version=versions, phase=st.sampled_from(PHASES))
def test_swap_space_is_never_recommended_after_0_17(version: str, phase: Phase) -> None:
    fixes = rank_fixes(
        FixRequest(
            phase=phase, facts=RICH, engine_version=version, command="vllm serve m --swap-space 4", top=20
        ),
        PACK,
    )
    kept = [f for f in fixes if "--swap-space" in f.change and not f.change.startswith("remove ")]
    # only a host running out of RAM is helped by a smaller swap space, and only while the flag exists
    assert not kept or (phase == "host_oom" and _release(version) < (0, 18, 0))
    removed = any(f.change == "remove --swap-space" for f in fixes)
    assert removed == (_release(version) >= (0, 18, 0))


@settings(max_examples=60, deadline=None)
@given(version=versions)
def test_kv_cache_memory_bytes_is_never_recommended_before_0_10_2(version: str) -> None:
    phases: tuple[Phase, ...] = ("kv_cache_capacity", "profiling_inconsistent")
    for phase in phases:
        fixes = rank_fixes(FixRequest(phase=phase, facts=RICH, engine_version=version, top=20), PACK)
        if _release(version) < (0, 10, 2):
            assert all("--kv-cache-memory-bytes" not in f.change for f in fixes)


@pytest.mark.parametrize(
    ("version", "range_text", "span"),
    [
        ("0.10.2", ">=0.9.1", ((0, 10, 2),)),
        (None, ">=0.8.0", ((0, 8, 0), None)),
        (None, ">=0.9.1,<=0.13", ((0, 9, 1), (0, 13, 999))),
        (None, "<=0.11.0", ((0, 2, 7), (0, 11, 0))),
        (None, None, (None,)),
    ],
)
def test_a_version_range_becomes_the_span_fixes_must_hold_for(
    version: str | None, range_text: str | None, span: tuple[tuple[int, int, int] | None, ...]
) -> None:
    assert parse_span(version, range_text) == span


def test_a_flag_is_offered_for_a_range_only_if_every_version_in_it_has_the_flag() -> None:
    facts = Facts(max_num_seqs=256)
    straddling = rank_fixes(
        FixRequest(phase="warmup_oom", facts=facts, engine_version=None, version_range=">=0.9.1,<=0.13"), PACK
    )
    assert all(f.id != "capture-fewer-cuda-graphs" for f in straddling)
    newer = rank_fixes(
        FixRequest(phase="warmup_oom", facts=facts, engine_version=None, version_range=">=0.12.0"), PACK
    )
    assert any(f.change.startswith("--cudagraph-capture-sizes") for f in newer)


def test_a_flag_is_called_missing_for_a_range_only_if_no_version_in_it_has_it() -> None:
    command = "vllm serve m --swap-space 4"
    maybe = rank_fixes(
        FixRequest(
            phase="not_memory", facts=Facts(), engine_version=None, command=command, version_range="<=0.20"
        ),
        PACK,
    )
    assert all("--swap-space" not in f.change for f in maybe)
    surely = rank_fixes(
        FixRequest(
            phase="not_memory", facts=Facts(), engine_version=None, command=command, version_range=">=0.18.0"
        ),
        PACK,
    )
    assert surely[0].change == "remove --swap-space"
    assert "vLLM 0.18.0 rejects it" in surely[0].why


def test_a_range_with_only_an_upper_bound_never_offers_a_flag_its_older_releases_lack() -> None:
    # A 0.2.7 log the classifier can only bound as `<=0.10.2`: --cuda-graph-sizes exists from 0.9.2.
    fixes = rank_fixes(
        FixRequest(phase="warmup_oom", facts=RICH, engine_version=None, top=20, version_range="<=0.10.2"),
        PACK,
    )
    changes = " ".join(f.change for f in fixes)
    assert "--enforce-eager" in changes
    assert "--cuda-graph-sizes" not in changes
    assert "--cudagraph-capture-sizes" not in changes


def test_a_stated_vllm_0_1_log_still_gets_the_flags_vllm_0_1_had() -> None:
    facts = Facts(dtype="bfloat16", compute_capability="7.5", gpu_name="Tesla T4")
    fixes = rank_fixes(
        FixRequest(phase="dtype_unsupported", facts=facts, engine_version="0.1.7", top=5), PACK
    )
    assert [f.change for f in fixes][:1] == ["--dtype half"]
