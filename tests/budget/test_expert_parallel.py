"""Expert parallelism and data parallelism: how a MoE model's experts spread over the GPUs."""

from __future__ import annotations

import pytest

from service.budget import estimate
from service.errors import InvalidConfigError
from service.packs.catalog import Catalog
from service.schemas import Budget, EstimateRequest

QWEN_MOE = "Qwen3-30B-A3B"  # 128 experts
MIXTRAL = "Mixtral-8x7B-Instruct-v0.1"  # 8 experts


def _budget(catalog: Catalog, model: str, **fields: object) -> Budget:
    request = EstimateRequest(model=model, gpu="H100", vllm_version="0.33.0", **fields)  # type: ignore[arg-type]
    return estimate(request, catalog)


def test_experts_split_whole_hold_what_tp_slices_hold_when_both_divide(catalog: Catalog) -> None:
    sliced = _budget(catalog, QWEN_MOE, gpus=8, tensor_parallel_size=8)
    whole = _budget(catalog, QWEN_MOE, gpus=8, tensor_parallel_size=8, enable_expert_parallel=True)
    assert (sliced.expert_parallel_size, whole.expert_parallel_size) == (1, 8)
    assert whole.weights_gib == pytest.approx(sliced.weights_gib, abs=1e-3)


def test_the_expert_parallel_group_is_tp_times_dp(catalog: Catalog) -> None:
    budget = _budget(
        catalog, QWEN_MOE, gpus=8, tensor_parallel_size=2, data_parallel_size=4, enable_expert_parallel=True
    )
    assert (budget.tensor_parallel_size, budget.data_parallel_size, budget.expert_parallel_size) == (2, 4, 8)
    assert budget.gpus == 8


def test_data_parallel_slices_experts_over_tp_times_dp_and_attention_over_tp(catalog: Catalog) -> None:
    tp8 = _budget(catalog, QWEN_MOE, gpus=8, tensor_parallel_size=8)
    tp4 = _budget(catalog, QWEN_MOE, gpus=4, tensor_parallel_size=4)
    tp4_dp2 = _budget(catalog, QWEN_MOE, gpus=8, tensor_parallel_size=4, data_parallel_size=2)
    assert tp8.weights_gib < tp4_dp2.weights_gib < tp4.weights_gib
    # each data-parallel engine keeps its own KV cache with TP 4's heads per GPU
    assert tp4_dp2.kv_bytes_per_token == tp4.kv_bytes_per_token


def test_experts_that_do_not_divide_put_one_more_on_the_first_gpus(catalog: Catalog) -> None:
    even = _budget(
        catalog, MIXTRAL, gpus=8, tensor_parallel_size=2, data_parallel_size=4, enable_expert_parallel=True
    )
    uneven = _budget(
        catalog, MIXTRAL, gpus=6, tensor_parallel_size=2, data_parallel_size=3, enable_expert_parallel=True
    )
    assert uneven.weights_gib > even.weights_gib  # 2 of the 8 experts on the fullest GPU, not 1
    assert any("first 2 hold one more" in note for note in uneven.notes)
    assert not any("hold one more" in note for note in even.notes)


def test_more_expert_parallel_gpus_than_experts_is_refused(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="without any of the 8 experts"):
        _budget(
            catalog,
            MIXTRAL,
            gpus=16,
            tensor_parallel_size=4,
            data_parallel_size=4,
            enable_expert_parallel=True,
        )


def test_expert_parallel_on_a_dense_model_changes_nothing_and_says_so(catalog: Catalog) -> None:
    plain = _budget(catalog, "Llama-3.1-8B-Instruct", gpus=2)
    flagged = _budget(catalog, "Llama-3.1-8B-Instruct", gpus=2, enable_expert_parallel=True)
    assert (flagged.weights_gib, flagged.expert_parallel_size) == (plain.weights_gib, 1)
    assert any("the model has no experts" in note for note in flagged.notes)


def test_data_parallel_gpus_beyond_those_given_are_said(catalog: Catalog) -> None:
    budget = _budget(catalog, QWEN_MOE, gpus=4, tensor_parallel_size=4, data_parallel_size=2)
    assert "TP 4 × PP 1 × DP 2 needs 8 GPUs; only 4 were given." in budget.notes
