"""A fix the person says worked, or did not, read as evidence for the phases its recipe serves
(service/diagnosis/remedies.py; the fix recipes of rules/fixes/ are the one home of which fix serves
which phase)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.diagnosis.normalize import Document
from service.diagnosis.placement import Clue, weigh
from service.diagnosis.remedies import RemedySaid, remedies_said
from service.packs import RulePacks
from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

BARE_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 512.00 MiB is free."
)


def _said(packs: RulePacks, text: str) -> list[RemedySaid]:
    return remedies_said(Document(text), packs.prose, packs.fixes)


def _phases(said: RemedySaid) -> dict[str, float]:
    return dict(said.shares)


def test_a_fix_said_to_work_weighs_the_phases_its_recipe_serves(packs: RulePacks) -> None:
    (said,) = _said(packs, "Adding --enforce-eager solved the problem for us.")
    assert said.worked and _phases(said) == {"warmup_oom": 1.0}


def test_a_fix_said_to_change_nothing_is_evidence_against_its_phases(packs: RulePacks) -> None:
    (said,) = _said(packs, "I tried --enforce-eager, no change at all.")
    assert not said.worked and _phases(said) == {"warmup_oom": 1.0}


def test_chinese_words_say_a_fix_worked_or_not(packs: RulePacks) -> None:
    failed, worked = _said(packs, "把 --max-model-len 调小没有用，加了 --enforce-eager 就正常启动了。")
    assert not failed.worked and "kv_cache_capacity" in _phases(failed)
    assert worked.worked and _phases(worked) == {"warmup_oom": 1.0}


def test_the_direction_a_setting_moved_picks_the_recipes_that_move_it_so(packs: RulePacks) -> None:
    # --gpu-memory-utilization is raised for the KV cache and lowered for start-up's headroom
    (raised,) = _said(packs, "Raising --gpu-memory-utilization to 0.95 fixed it.")
    (lowered,) = _said(packs, "We changed gpu_memory_utilization from 0.9 to 0.7 and that fixed it.")
    assert _phases(raised) == {"kv_cache_capacity": 1.0}
    assert {"startup_budget", "warmup_oom", "runtime_oom"} <= set(_phases(lowered))
    assert _phases(lowered)["kv_cache_capacity"] < 1.0  # only its allocation OOM's recipe lowers it


def test_a_setting_moved_no_stated_way_gives_nothing_where_its_recipes_move_it_both_ways(
    packs: RulePacks,
) -> None:
    assert _said(packs, "Changing --gpu-memory-utilization fixed it.") == []


@pytest.mark.parametrize(
    "text",
    [
        "Try lowering --max-model-len, that should fix it.",
        "Would --enforce-eager fix this?",
        "如果加上 --enforce-eager 能解决吗？",
        "I use --enforce-eager and --max-model-len 8192.",
    ],
)
def test_advice_questions_and_settings_without_an_outcome_say_nothing(packs: RulePacks, text: str) -> None:
    assert _said(packs, text) == []


def test_evidence_against_a_phase_shrinks_its_support_and_gives_no_other_any(packs: RulePacks) -> None:
    words = Clue("prose", "profiling", "the person's words")
    against = Clue("remedy_failed", "warmup", "a fix that changed nothing", against=True)
    spread = Clue("remedy", "kv_cache", "a fix that worked")
    alone = weigh([words], packs.evidence)
    weakened = weigh([words, against], packs.evidence)
    assert alone is not None and weakened is not None
    assert weakened.phase == alone.phase == "warmup_oom" and weakened.confidence <= alone.confidence
    turned = weigh([words, against, spread], packs.evidence)
    assert turned is not None and turned.phase == "kv_cache_capacity"
    assert weigh([against], packs.evidence) is None


def test_a_fix_that_worked_places_a_bare_oom_the_words_do_not(run_classify: Classify) -> None:
    text = (
        "After the weights load it runs out of memory; --enforce-eager did not help, but lowering "
        f"--max-model-len to 16384 fixed it.\n\n{BARE_OOM}"
    )
    assert run_classify(text).phase == "kv_cache_capacity"


def test_a_fix_said_to_work_beside_a_healthy_log_finds_no_failure(run_classify: Classify) -> None:
    text = (
        "Lowering --max-num-seqs to 64 fixed the earlier crash.\n\n"
        "INFO 01-01 00:00:01 [api_server.py:1] Application startup complete."
    )
    assert run_classify(text).phase == "no_failure"


@pytest.mark.parametrize(
    "text",
    [
        "If I pass --enforce-eager the server starts and serves fine.",
        "When we add --enforce-eager, it comes up.",
        "如果我加上 --enforce-eager 就能正常启动。",
    ],
)
def test_a_first_person_condition_is_an_experiment_that_worked(packs: RulePacks, text: str) -> None:
    (said,) = _said(packs, text)
    assert said.worked and _phases(said) == {"warmup_oom": 1.0}


def test_a_run_that_got_further_under_a_conditions_flag_is_a_fix_that_worked(packs: RulePacks) -> None:
    (said,) = _said(packs, "With --enforce-eager it loads but then OOMs on the first request.")
    assert said.worked and _phases(said) == {"warmup_oom": 1.0}


def test_advice_under_a_condition_is_still_no_remedy(packs: RulePacks) -> None:
    assert _said(packs, "If you pass --enforce-eager the server starts fine.") == []
