"""A pasted command's flags are settings the person chose, not a vLLM message retold: a `vllm serve`
block whose flags share words with a refusal (`--kv-cache-dtype fp8`, `--gpu-memory-utilization`)
names no failure; what the person says happened decides."""

from __future__ import annotations

from collections.abc import Callable

from service.schemas import Diagnosis

Classify = Callable[..., Diagnosis]

COMMAND = (
    "vllm serve \\\n"
    "    openai/gpt-oss-20b \\\n"
    "    --host 0.0.0.0 \\\n"
    "    --gpu-memory-utilization 0.70 \\\n"
    "    --enable-prefix-caching \\\n"
    "    --quantization mxfp4 \\\n"
    "    --attention-backend FLASHINFER \\\n"
    "    --kv-cache-dtype fp8 \\\n"
    "    --max-num-batched-tokens 8192 \\\n"
    "    --tensor-parallel-size 2\n"
)


def test_flags_of_a_pasted_command_are_not_a_retold_refusal(run_classify: Classify) -> None:
    log = f"I started it like this:\n\n{COMMAND}\nand the logs stop after the first shard.\n"
    assert run_classify(log).phase in ("no_failure", "not_memory")


def test_a_model_that_does_not_load_is_a_stated_failure(run_classify: Classify) -> None:
    log = f"model doesn't load on the second node\n\n{COMMAND}"
    assert run_classify(log).phase == "not_memory"
