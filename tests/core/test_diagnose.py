"""The core facade: what diagnose() adds on top of classify (budget, fixes) and how they agree."""

from __future__ import annotations

import pytest

from service.core import diagnose
from service.packs import RulePacks
from service.schemas import DiagnoseRequest

OOM_70B_ON_4090 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total "
    "capacity of 23.65 GiB of which 301.44 MiB is free."
)


def test_free_memory_at_oom_time_is_not_taken_as_startup_free_memory(packs: RulePacks) -> None:
    request = DiagnoseRequest(log=OOM_70B_ON_4090, model="meta-llama/Llama-3.3-70B-Instruct", gpu="RTX 4090")
    diagnosis = diagnose(request, packs)
    assert diagnosis.facts.free_gib == pytest.approx(301.44 / 1024)
    assert diagnosis.budget is not None
    assert diagnosis.budget.startup_check.free_gib is None
    assert diagnosis.budget.startup_check.passes is None
    assert "refuses to start" not in diagnosis.budget.verdict


def test_startup_message_free_memory_still_feeds_the_startup_check(packs: RulePacks) -> None:
    log = (
        "ValueError: Free memory on device cuda:0 (9.87/11.0 GiB) on startup is less than desired GPU "
        "memory utilization (0.92, 10.12 GiB). Decrease GPU memory utilization or reduce GPU memory used "
        "by other processes."
    )
    request = DiagnoseRequest(log=log, model="Qwen/Qwen2.5-0.5B-Instruct", vllm_version="0.32.0")
    diagnosis = diagnose(request, packs)
    assert diagnosis.phase == "startup_budget"
    assert diagnosis.budget is not None
    assert diagnosis.budget.startup_check.free_gib == pytest.approx(9.87)
    assert diagnosis.budget.startup_check.passes is False


def test_no_larger_gpu_is_offered_when_no_catalog_gpu_is_that_large(packs: RulePacks) -> None:
    # 405B in bf16 needs about 760 GiB per GPU; the largest catalog GPU (B300) has 269
    request = DiagnoseRequest(log=OOM_70B_ON_4090, model="meta-llama/Llama-3.1-405B-Instruct", gpu="RTX 4090")
    fixes = diagnose(request, packs).fixes
    assert fixes and "use-larger-gpu" not in [fix.id for fix in fixes]


def test_a_larger_gpu_is_named_from_the_catalog_when_one_exists(packs: RulePacks) -> None:
    log = OOM_70B_ON_4090.replace("23.65 GiB", "14.58 GiB")
    request = DiagnoseRequest(log=log, model="meta-llama/Llama-3.1-8B-Instruct", gpu="T4", top=10)
    larger = [fix for fix in diagnose(request, packs).fixes if fix.id == "use-larger-gpu"]
    assert len(larger) == 1
    assert larger[0].change.startswith("run on ") and "GiB each" in larger[0].change


@pytest.mark.parametrize(
    ("hints", "named", "consequence"),
    [
        ({"model": "nosuch-model"}, "nosuch-model", "no memory budget"),
        ({"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "nosuch-gpu"}, "nosuch-gpu", "23.65 GiB GPU"),
    ],
)
def test_an_unknown_model_or_gpu_hint_is_said_with_its_consequence(
    packs: RulePacks, hints: dict[str, str], named: str, consequence: str
) -> None:
    diagnosis = diagnose(DiagnoseRequest(log=OOM_70B_ON_4090, **hints), packs)
    [finding] = [f for f in diagnosis.findings if f.rule == "request-hint-unknown"]
    assert finding.severity == "warning"
    assert named in (finding.message or "")
    assert consequence in (finding.message or "")
