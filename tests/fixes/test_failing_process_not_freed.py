"""The fixes never offer to free vLLM's own failing worker when PyTorch lists it as another process
(service.processes, shared with the diagnosis)."""

from __future__ import annotations

import msgspec

from service.fixes import FixRequest, rank_fixes
from service.packs.fixes import FixPack
from service.schemas import Facts, OtherProcess


def test_the_fixes_do_not_offer_to_free_the_failing_worker(pack: FixPack) -> None:
    facts = Facts(
        free_gib=0.05,
        total_gib=44.35,
        tried_to_allocate_gib=0.11,
        torch_allocated_gib=37.38,
        torch_reserved_unallocated_gib=0.26921875,
        other_processes=[OtherProcess(pid=3663367, used_gib=44.28)],
    )
    fixes = rank_fixes(FixRequest(phase="weights_oom", facts=facts, engine_version="0.6.3", top=10), pack)
    assert all("3663367" not in f.change for f in fixes)
    stated = msgspec.structs.replace(facts, process_in_use_gib=40.0)
    fixes = rank_fixes(FixRequest(phase="weights_oom", facts=stated, engine_version="0.6.3", top=10), pack)
    assert any("3663367" in f.change for f in fixes)
