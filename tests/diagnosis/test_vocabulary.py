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
            "dtype_unsupported",
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
