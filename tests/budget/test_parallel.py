"""Tensor/pipeline-parallel sizes vLLM accepts: one test per rule, on catalog models."""

from __future__ import annotations

import msgspec
import pytest

from service.budget import estimate
from service.budget.parallel import (
    pipeline_parallel_problem,
    tensor_parallel_problem,
    valid_pipeline_parallel_sizes,
    valid_tensor_parallel_sizes,
)
from service.budget.resolve import find_model, find_quantization
from service.errors import InvalidConfigError
from service.packs.catalog import Catalog, ModelSpec
from service.schemas import EstimateRequest


def _model(catalog: Catalog, name: str) -> ModelSpec:
    return find_model(catalog, name)[0]


def test_attention_heads_must_divide(catalog: Catalog) -> None:
    problem = tensor_parallel_problem(_model(catalog, "DeepSeek-R1"), 3, catalog.engine)
    assert problem is not None and "attention heads (128)" in problem


@pytest.mark.parametrize(("model", "tp"), [("DeepSeek-R1-Distill-Qwen-32B", 5), ("Qwen2.5-32B", 20)])
def test_kv_heads_divide_or_replicate_whole(catalog: Catalog, model: str, tp: int) -> None:
    # both divide the 40 attention heads; neither divides the 8 KV heads nor is a multiple of them
    problem = tensor_parallel_problem(_model(catalog, model), tp, catalog.engine)
    assert problem is not None and "8 KV heads" in problem


def test_tp_a_multiple_of_the_kv_heads_replicates_them(catalog: Catalog) -> None:
    llama = _model(catalog, "Llama-3.1-70B-Instruct")
    assert tensor_parallel_problem(llama, 16, catalog.engine) is None
    assert valid_tensor_parallel_sizes(llama, catalog.engine) == [1, 2, 4, 8, 16, 32, 64]


def test_remembered_tp_sizes_are_a_fresh_list_and_a_changed_model_is_asked_again(catalog: Catalog) -> None:
    llama = _model(catalog, "Llama-3.1-70B-Instruct")
    valid_tensor_parallel_sizes(llama, catalog.engine).append(3)  # a caller's list is its own
    assert valid_tensor_parallel_sizes(llama, catalog.engine) == [1, 2, 4, 8, 16, 32, 64]
    # a spec built per request (a config.json) with other heads is not answered with the catalog's
    fewer_heads = msgspec.structs.replace(llama, num_attention_heads=16)
    assert valid_tensor_parallel_sizes(fewer_heads, catalog.engine) == [1, 2, 4, 8, 16]


def test_mlp_intermediate_size_must_divide(catalog: Catalog) -> None:
    problem = tensor_parallel_problem(_model(catalog, "DeepSeek-R1-Distill-Qwen-1.5B"), 6, catalog.engine)
    assert problem is not None and "MLP intermediate size 8960" in problem


def test_expert_intermediate_size_must_divide(catalog: Catalog) -> None:
    problem = tensor_parallel_problem(_model(catalog, "Mixtral-8x22B-Instruct-v0.1"), 24, catalog.engine)
    assert problem is not None and "experts' intermediate size 16384" in problem


def test_padded_vocabulary_must_divide(catalog: Catalog) -> None:
    # 40 heads and 10 KV heads divide by 5, so does the MLP (17920); 32064 does not
    problem = tensor_parallel_problem(_model(catalog, "Phi-3-medium-4k-instruct"), 5, catalog.engine)
    assert problem is not None and "vocabulary padded to 32064" in problem


def test_quantization_groups_must_not_straddle_gpus(catalog: Catalog) -> None:
    spec, quant = find_model(catalog, "TheBloke/Llama-2-7B-Chat-AWQ")
    assert quant is not None
    awq = find_quantization(catalog, quant.method)
    assert tensor_parallel_problem(spec, 2, catalog.engine, awq) is None
    problem = tensor_parallel_problem(spec, 4, catalog.engine, awq)
    assert problem is not None and "groups of 128" in problem and "2752" in problem


def test_marlin_tiles_bound_a_channelwise_checkpoint(catalog: Catalog) -> None:
    # group_size -1 (one scale per output channel) has no groups to straddle; Marlin's
    # min_thread_k = 128 still applies to each GPU's 11008 / 4 = 2752 input columns
    spec = _model(catalog, "Llama-2-7b-chat-hf")
    gptq = find_quantization(catalog, "gptq")
    channelwise = msgspec.structs.replace(gptq, group_size=None, scale_bytes=0.0, zero_bits=0)
    problem = tensor_parallel_problem(spec, 4, catalog.engine, channelwise)
    assert problem is not None and "min_thread_k = 128" in problem


def test_pipeline_stages_need_a_layer_each(catalog: Catalog) -> None:
    small = _model(catalog, "Qwen2.5-0.5B-Instruct")
    assert pipeline_parallel_problem(small, small.num_hidden_layers) is None
    assert pipeline_parallel_problem(small, small.num_hidden_layers + 1) is not None
    assert valid_pipeline_parallel_sizes(small, 64)[-1] == small.num_hidden_layers


@pytest.mark.parametrize("model", ["DeepSeek-R1-Distill-Qwen-32B", "Qwen2.5-32B"])
def test_smallest_fitting_tp_is_one_vllm_accepts(catalog: Catalog, model: str) -> None:
    budget = estimate(EstimateRequest(model=model, gpu="RTX 4090", gpus=2, max_model_len=32768), catalog)
    assert budget.min_tensor_parallel_size == 4


def test_a_rejected_tp_is_an_input_error(catalog: Catalog) -> None:
    request = EstimateRequest(model="Qwen2.5-32B", gpu="RTX 4090", gpus=8, tensor_parallel_size=5)
    with pytest.raises(InvalidConfigError, match="8 KV heads"):
        estimate(request, catalog)


def test_no_catalog_model_ever_gets_a_rejected_smallest_tp(catalog: Catalog) -> None:
    for spec in catalog.models.models:
        budget = estimate(EstimateRequest(model=spec.id, gpu="RTX 3060", max_model_len=4096), catalog)
        tp = budget.min_tensor_parallel_size
        if tp is not None:
            assert tensor_parallel_problem(spec, tp, catalog.engine) is None, spec.id
