"""vLLM's configuration refusals (a quantization method with a parallel layout or a dtype, a layout
the node or the architecture cannot hold) are read as their phase in whatever shape they are pasted:
an exception line, a logger line, an issue's title, a bare description line. The lines are vLLM's own
templates (rules/inventory/vllm.yaml) with the values a run prints."""

from __future__ import annotations

import pytest

from service.core import classify
from service.packs import RulePacks
from service.schemas import DiagnoseRequest

QUANTIZATION = [
    # config.py verify_with_parallel_config, 0.5-0.6
    "BitAndBytes quantization with TP or PP is not supported yet.",
    # bitsandbytes loader _load_weights, 0.6-0.9 (both wordings)
    "Prequant BitsAndBytes models with tensor parallelism is not supported. "
    "Please try with pipeline parallelism.",
    "Prequant BitsAndBytes models with TP is not supported.Please try with PP.",
    # compressed_tensors_moe.py create_weights, 0.6-0.9
    "float16 is required for MoE compressed models. Set dtype=torch.float16",
]
PARALLELISM = [
    # multiproc_gpu_executor.py / mp_distributed_executor.py
    "please set tensor_parallel_size (8) to less than max local gpu count (4)",
    "please ensure that world_size (8) is less than than max local gpu count (4)",
    # config.py verify_with_parallel_config, 0.5-0.6
    "Pipeline parallelism is only supported for the following  architectures: "
    "['AquilaModel', 'LlamaForCausalLM', 'MistralForCausalLM'].",
    "Pipeline parallelism is not supported for this model. "
    "Supported models implement the `SupportsPP` interface.",
]
SHAPES = [
    pytest.param("ValueError: {}", id="exception-line"),
    pytest.param("ERROR 08-19 16:07:35 worker_base.py:438] ValueError: {}", id="logger-line"),
    pytest.param("[Bug]: {}\n\n### Your current environment\n\nPyTorch version: 2.3.0+cu121\n", id="title"),
    pytest.param("### The feature, motivation and pitch\n\n{}\n", id="bare-description-line"),
]


def _phase(packs: RulePacks, log: str) -> str:
    return classify(DiagnoseRequest(log=log), packs).phase


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("message", QUANTIZATION)
def test_a_quantization_method_refused_with_a_layout_or_dtype_is_quantization_config(
    packs: RulePacks, message: str, shape: str
) -> None:
    assert _phase(packs, shape.format(message)) == "quantization_config"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("message", PARALLELISM)
def test_a_layout_the_node_or_model_cannot_hold_is_parallelism_config(
    packs: RulePacks, message: str, shape: str
) -> None:
    assert _phase(packs, shape.format(message)) == "parallelism_config"


def test_the_bitsandbytes_refusal_cut_after_its_first_words_is_still_quantization_config(
    packs: RulePacks,
) -> None:
    log = (
        '  File "/venv/lib/python3.12/site-packages/vllm/model_executor/model_loader/loader.py", '
        "line 1058, in _load_weights\n    raise ValueError(\nValueError: Prequant BitsAndBytes\n"
    )
    assert _phase(packs, log) == "quantization_config"


def test_the_shared_memory_queue_wait_is_not_a_kv_cache_failure(packs: RulePacks) -> None:
    log = (
        "[Bug]: No available block found in 60 second.\n\n"
        "Loading safetensors checkpoint shards:  19% Completed\n"
    )
    assert _phase(packs, log) == "not_memory"
