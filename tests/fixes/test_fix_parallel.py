"""Tensor-parallel fixes re-estimated: only sizes vLLM accepts, alone only when the re-run fits."""

from __future__ import annotations

from pathlib import Path

from service.budget import estimate
from service.core import classify
from service.fixes import FixRequest, rank_fixes
from service.fixes.command import corrected_command, edit_of
from service.fixes.diagnosis import with_fixes
from service.fixes.lookup import CatalogLookup
from service.packs import load_packs
from service.packs.catalog import load_catalog
from service.packs.fixes import FixPack
from service.schemas import DiagnoseRequest, EstimateRequest, Facts

RULES = Path(__file__).resolve().parents[2] / "rules"
_TWO_GPUS = "ValueError: World size (4) is larger than the number of available GPUs (2) in this node."


def test_with_two_gpus_a_70b_at_32k_gets_tp_2_with_the_length_tp_2_holds(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    catalog = load_catalog(RULES)
    request = EstimateRequest(
        model="Llama-3.1-70B-Instruct", gpu="A100-80GB", max_model_len=32768, tensor_parallel_size=1
    )
    budget = estimate(request, catalog)
    facts = Facts(model=budget.model, max_model_len=32768, tensor_parallel_size=1)
    request = FixRequest(
        phase="weights_oom", facts=facts, budget=budget, engine_version="0.33.0", evidence=[_TWO_GPUS]
    )
    fixes = rank_fixes(request, pack, catalog=lookup)
    top = fixes[0]
    edit = edit_of(top.change)
    assert edit is not None
    settings = dict(edit.settings)
    assert settings["--tensor-parallel-size"] == ("2",)
    length = int(settings["--max-model-len"][0])
    assert 0 < length < 32768
    assert "TP 2 alone is not enough" in top.why and "TP 4 holds all 32,768 tokens" in top.why
    rerun = lookup.reestimate(budget, tensor_parallel_size=2, max_model_len=length)
    assert rerun is not None and rerun.fits
    command = "vllm serve meta-llama/Llama-3.1-70B-Instruct --max-model-len 32768"
    assert corrected_command(command, top.change) == (
        f"vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 2 --max-model-len {length}"
    )


def test_kv_capacity_on_two_4090s_never_names_a_size_vllm_rejects(
    pack: FixPack, lookup: CatalogLookup
) -> None:
    # 40 heads divide by 5 and by 20, but the 8 KV heads and the 27648 MLP do not
    catalog = load_catalog(RULES)
    for model in ("DeepSeek-R1-Distill-Qwen-32B", "Qwen2.5-32B-Instruct"):
        request = EstimateRequest(model=model, gpu="RTX 4090", max_model_len=32768, tensor_parallel_size=2)
        budget = estimate(request, catalog)
        facts = Facts(model=budget.model, max_model_len=32768, tensor_parallel_size=2, num_attention_heads=40)
        request = FixRequest(phase="kv_cache_capacity", facts=facts, budget=budget, engine_version="0.33.0")
        fixes = rank_fixes(request, pack, catalog=lookup)
        for fix in fixes:
            edit = edit_of(fix.change)
            tp = dict(edit.settings).get("--tensor-parallel-size") if edit is not None else None
            assert tp is None or int(tp[0]) in (1, 2, 4, 8), fix.change


def test_a_combined_change_sets_each_flag(pack: FixPack) -> None:
    edit = edit_of("--tensor-parallel-size 2 --max-model-len 18624", pack.aliases)
    assert edit is not None
    assert edit.settings == (("--tensor-parallel-size", ("2",)), ("--max-model-len", ("18624",)))
    command = "vllm serve m -tp 1 --max-model-len 32768"
    assert corrected_command(command, "--tensor-parallel-size 2 --max-model-len 18624", pack.aliases) == (
        "vllm serve m --tensor-parallel-size 2 --max-model-len 18624"
    )


_PLACEMENT = (
    "ValueError: The number of required GPUs exceeds the total number of available GPUs in the "
    "placement group.\n"
)


def test_a_placement_group_short_of_gpus_gets_the_fix_that_exposes_them(pack: FixPack) -> None:
    catalog = load_catalog(RULES)
    command = (
        "vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --pipeline-parallel-size 2"
    )
    request = DiagnoseRequest(log=_PLACEMENT, command=command)
    diagnosis = with_fixes(classify(request, load_packs()), request, pack, catalog)
    assert diagnosis.phase == "parallelism_config"
    assert [f.id for f in diagnosis.fixes] == ["make-gpus-visible"]
    assert diagnosis.fixes[0].change.startswith("make all 8 GPUs visible to vLLM")


def test_with_the_gpus_present_known_tp_fits_them_per_pipeline_stage(pack: FixPack) -> None:
    # TP 4 x PP 2 on 4 GPUs: each of the 2 stages gets 2 of them
    facts = Facts(num_attention_heads=64, tensor_parallel_size=4, pipeline_parallel_size=2)
    evidence = ["ValueError: World size (8) is larger than the number of available GPUs (4) in this node."]
    request = FixRequest(phase="parallelism_config", facts=facts, engine_version="0.33.0", evidence=evidence)
    fixes = rank_fixes(request, pack)
    assert "--tensor-parallel-size 2" in [f.change for f in fixes]
