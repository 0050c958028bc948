"""vLLM's own lines the vocabulary lacked, and a GPU generation's missing number type, on synthetic
pastes (other models, GPUs, releases and shapes than any corpus case)."""

from __future__ import annotations

import pytest

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest


@pytest.mark.parametrize(
    ("log", "phase", "facts"),
    [
        pytest.param(
            'llm = LLM(model="/data/mistral-7b", quantization="gptq")\n'
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/site-packages/vllm/model_executor/weight_utils.py", line 114, '
            "in get_quant_config\n"
            '    raise ValueError(f"Cannot find the config file for {quantization}")\n'
            "ValueError: Cannot find the config file for gptq\n",
            "quantization_config",
            {"quantization": "gptq"},
            id="quantization-config-file-missing",
        ),
        pytest.param(
            "(EngineCore_DP0 pid=311) WARNING 10-02 08:00:01 [cpu_gpu.py:95] "
            "cudaHostRegister failed for rank=5 "
            "(code=2) — transfers will still work but may be slower (unpinned DMA)\n",
            "host_oom",
            {},
            id="pinning-the-host-tier-failed",
        ),
        pytest.param(
            "ValueError: bfloat16 KV cache is not supported on GeForce GTX 1080 Ti (compute capability\n"
            "6.1); bfloat16 requires SM80+. Re-run with --kv-cache-dtype float16.\n",
            "dtype_unsupported",
            {"compute_capability": "6.1"},
            id="kv-cache-dtype-wrapped-before-its-figure",
        ),
        pytest.param(
            "fp8 weights on my V100 die in the kernel compile:\n\n"
            "    triton.compiler.errors.CompilationError: at 12:4: "
            "type fp8e4b8 not supported in this architecture\n",
            # Triton's FP8 refusal for a quantized model's weights: a quantization the GPU cannot run
            # (rules/signatures/startup.yaml triton-fp8-type-unsupported); an FP8 KV cache's is a dtype
            "quantization_config",
            {},
            id="a-compiler-refusing-a-number-type",
        ),
    ],
)
def test_vllm_and_kernel_lines_the_vocabulary_lacked(
    packs: RulePacks, log: str, phase: str, facts: dict[str, object]
) -> None:
    diagnosis = classify(DiagnoseRequest(log=log), packs)
    assert diagnosis.phase == phase
    for name, value in facts.items():
        assert getattr(diagnosis.facts, name) == value


def test_a_fallback_to_pinned_memory_is_no_failure(packs: RulePacks) -> None:
    log = "WARNING 10-02 08:00:01 [engram.py:40] Engram cudaHostRegister failed (12); using pinned memory.\n"
    assert classify(DiagnoseRequest(log=log), packs).phase == "no_failure"


@pytest.mark.parametrize(
    ("log", "named"),
    [
        pytest.param(
            "[Bug]: my finetune stops with Error while deserializing header: MetadataIncompleteBuffer\n\n"
            "vllm 0.9.2, one A10G\n",
            "MetadataIncompleteBuffer",
            id="a-library-error-phrase-in-a-title",
        ),
        pytest.param(
            "My agent gets `502: Bad Gateway` from the proxy after a few turns; vllm itself logs nothing.\n",
            "502",
            id="an-http-status-quoted-in-prose",
        ),
        pytest.param(
            "(ServeController pid=99) WARNING 2025-06-01 10:00:00 deployment_state.py:1758 -- Didn't receive "
            "health check response for replica Replica(id='x9', deployment='vLLM:llama') after 30.0s, "
            "marking it unhealthy.\n",
            "health check",
            id="ray-serve-marks-a-replica-unhealthy",
        ),
    ],
)
def test_an_error_that_is_not_vllms_text_is_seen_and_named(packs: RulePacks, log: str, named: str) -> None:
    diagnosis = classify(DiagnoseRequest(log=log), packs)
    assert diagnosis.phase == "not_memory"
    assert any(named in e.text for e in diagnosis.evidence)


def test_a_few_words_of_a_vllm_message_in_prose_do_not_outweigh_an_error_the_log_shows(
    packs: RulePacks,
) -> None:
    log = (
        "Following the guide I kept increasing gpu_memory_utilization when initializing the engine.\n\n"
        "INFO 06-01 10:00:00 [core.py:100] Warming up\n"
        "RuntimeError: CUDA error: misaligned address\n"
    )
    diagnosis = classify(DiagnoseRequest(log=log), packs)
    assert diagnosis.phase == "not_memory"
    assert any("misaligned address" in e.text for e in diagnosis.evidence)


def test_a_parallel_layout_that_does_not_multiply_out_is_a_parallelism_failure(packs: RulePacks) -> None:
    log = (
        "[rank5]: Traceback (most recent call last):\n"
        "[rank5]: RuntimeError: world_size (6) is not equal to tensor_model_parallel_size (2) x "
        "pipeline_model_parallel_size (2)\n"
    )
    diagnosis = classify(DiagnoseRequest(log=log), packs)
    assert diagnosis.phase == "parallelism_config"
    assert diagnosis.facts.pipeline_parallel_size == 2
