"""The budget through the core facade: `core.estimate` and the budget a diagnosis carries."""

from __future__ import annotations

import pytest

from service.core import diagnose, estimate
from service.packs import RulePacks
from service.schemas import DiagnoseRequest, EstimateRequest

KV_CAPACITY_LOG = (
    "INFO 05-02 10:00:00 [core.py:70] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='Qwen/Qwen2.5-0.5B-Instruct', speculative_config=None, tokenizer='Qwen/Qwen2.5-0.5B-Instruct', "
    "dtype=torch.float16, max_seq_len=2048, tensor_parallel_size=1, pipeline_parallel_size=1, "
    "quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda\n"
    "ERROR 05-02 10:00:09 [core.py:700] ValueError: To serve at least one request with the model's max seq "
    "len (2048), (0.02 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(0.02 GiB). Based on the available memory, the estimated maximum model length is 1344. Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
    "`max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n"
)


def test_rule_packs_carry_the_catalog(packs: RulePacks) -> None:
    assert len(packs.catalog.models.models) >= 40


def test_core_estimate_answers_from_the_packs(packs: RulePacks) -> None:
    budget = estimate(
        EstimateRequest(
            model="Qwen/Qwen2.5-0.5B-Instruct", gpu="L4", dtype="float16", kv_cache_memory_bytes=16 * 2**20
        ),
        packs,
    )
    assert budget.num_blocks == 85


def test_diagnosis_carries_a_budget_when_model_and_gpu_are_known(packs: RulePacks) -> None:
    diagnosis = diagnose(DiagnoseRequest(log=KV_CAPACITY_LOG, gpu="L4"), packs)
    assert diagnosis.budget is not None
    assert diagnosis.budget.model == "Qwen2.5-0.5B-Instruct"
    assert diagnosis.budget.max_model_len == 2048
    assert diagnosis.budget.vllm_version.startswith("0.32")


def test_diagnosis_has_no_budget_without_a_gpu(packs: RulePacks) -> None:
    assert diagnose(DiagnoseRequest(log=KV_CAPACITY_LOG), packs).budget is None


def test_gpt_oss_120b_weights_match_the_logged_64_38_gib(packs: RulePacks) -> None:
    budget = estimate(EstimateRequest(model="openai/gpt-oss-120b", gpu="H100", vllm_version="0.11.0"), packs)
    assert budget.weights_gib == pytest.approx(64.3846, rel=0.01)
