"""host_oom's fixes follow the stage the host ran out in: while the weights load, several workers
reading shards at once is the knob; once the KV cache is sized (the weights were in), the pinned
swap space is, and loading fewer workers at a time cannot help."""

from __future__ import annotations

from pathlib import Path

from service.fixes import FixRequest, rank_fixes
from service.packs.fixes import load_fix_recipes
from service.schemas import Facts

PACK = load_fix_recipes(Path(__file__).resolve().parents[2] / "rules")


def _first(facts: Facts) -> str:
    fixes = rank_fixes(FixRequest(phase="host_oom", facts=facts, engine_version="0.6.1", top=5), PACK)
    return fixes[0].id


def test_a_host_oom_while_several_workers_load_first_loads_them_one_at_a_time() -> None:
    assert _first(Facts(tensor_parallel_size=4)) == "load-with-fewer-workers"


def test_a_host_oom_after_the_kv_cache_was_sized_first_lowers_the_swap_space() -> None:
    facts = Facts(tensor_parallel_size=4, num_gpu_blocks=2048)
    fixes = rank_fixes(FixRequest(phase="host_oom", facts=facts, engine_version="0.6.1", top=5), PACK)
    assert fixes[0].id == "lower-swap-space"
    assert "load-with-fewer-workers" not in [f.id for f in fixes]
