"""Estimates of absurd or out-of-range input answer at once with a clear error or a sane verdict."""

from __future__ import annotations

import math

import pytest

from service.budget import budget_from_facts, estimate
from service.errors import InvalidConfigError
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest, Facts

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"])
def test_pasted_config_with_implausibly_large_dimensions_is_refused_not_sized(
    catalog: Catalog, key: str
) -> None:
    config: dict[str, object] = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
    }
    config[key] = 10**12
    with pytest.raises(InvalidConfigError, match=f"{key} 1000000000000 is implausibly large"):
        estimate(EstimateRequest(config=config, gpu="A100-80GB"), catalog)


@pytest.mark.parametrize("version", ["0.0.1", "0.1.2", "0.2.0"])
def test_versions_older_than_the_catalog_use_its_earliest_defaults(catalog: Catalog, version: str) -> None:
    budget = estimate(EstimateRequest(model=QWEN, gpu="A100-80GB", vllm_version=version), catalog)
    assert budget.gpu_memory_utilization == 0.9
    assert budget.vllm_version == version


def test_free_memory_above_the_gpu_total_is_a_clear_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="free_gib 1000.0 exceeds the 79.25 GiB"):
        estimate(EstimateRequest(model=QWEN, gpu="A100-80GB", free_gib=1000.0), catalog)


def test_free_memory_that_is_not_a_number_is_a_clear_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="free_gib must be a number"):
        estimate(EstimateRequest(model=QWEN, gpu="A100-80GB", free_gib=math.nan), catalog)


def test_kv_cache_memory_bytes_larger_than_the_gpu_does_not_fit(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=QWEN, gpu="A100-80GB", kv_cache_memory_bytes=10**20), catalog)
    assert budget.fits is False
    assert budget.max_model_len_fit == 0
    assert "exceed the 79.25 GiB" in budget.verdict


def test_kv_cache_memory_bytes_within_the_gpu_still_fits(catalog: Catalog) -> None:
    budget = estimate(
        EstimateRequest(model=QWEN, gpu="A100-80GB", kv_cache_memory_bytes=16 * 2**20, max_model_len=512),
        catalog,
    )
    assert budget.fits is True


_BASE: dict[str, object] = {
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sliding_window": -5}, "window must be positive"),
        ({"sliding_window": 4096, "sliding_window_pattern": -3}, "global_every must be 0"),
        ({"num_local_experts": 8, "num_experts_per_tok": 0}, "experts_per_token must be in"),
        (
            {"kv_lora_rank": 512, "qk_rope_head_dim": -1, "qk_nope_head_dim": 1, "v_head_dim": 1},
            "ranks > 0",
        ),
        ({"rope_scaling": {"type": "linear", "factor": 1e300}}, "rope_scaling factor 1e\\+300"),
        ({"rope_scaling": {"type": "yarn", "factor": math.inf}}, "rope_scaling factor inf"),
    ],
)
def test_pasted_config_with_an_impossible_section_is_an_input_error_not_a_crash(
    catalog: Catalog, extra: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        estimate(EstimateRequest(config={**_BASE, **extra}, gpu="A100-80GB"), catalog)


@pytest.mark.parametrize(("gpus", "said"), [(1, "the estimate assumes that many"), (2, "only 2 were given")])
def test_tensor_parallel_larger_than_the_gpus_given_is_said_in_a_note(
    catalog: Catalog, gpus: int, said: str
) -> None:
    budget = estimate(
        EstimateRequest(
            model=QWEN, gpu="A100-80GB", gpus=gpus, tensor_parallel_size=2, pipeline_parallel_size=2
        ),
        catalog,
    )
    assert budget.gpus == 4
    assert f"TP 2 × PP 2 needs 4 GPUs; {said}." in budget.notes


@pytest.mark.parametrize(
    ("gpu", "others"),
    [
        ("A100", "A100-PCIE-40GB, A100-SXM4-40GB"),
        ("V100", "V100-PCIE-32GB, V100-SXM2-32GB, V100S-PCIE-32GB"),
        ("RTX 4090", "RTX-4090-Laptop"),
        ("RTX 4060 Ti", "RTX-4060-Ti-8GB"),
    ],
)
def test_a_gpu_family_name_with_several_memory_sizes_says_which_one_it_assumed(
    catalog: Catalog, gpu: str, others: str
) -> None:
    budget = estimate(EstimateRequest(model=QWEN, gpu=gpu), catalog)
    assert f"{gpu!r} is read as {budget.gpu} ({budget.total_gib} GiB); " in " ".join(budget.notes)
    assert f"({others})." in " ".join(budget.notes)


@pytest.mark.parametrize("gpu", ["A100-80GB", "A10", "L4", "RTX 3090", "T4", "MI300X"])
def test_an_exact_or_unambiguous_gpu_name_adds_no_size_note(catalog: Catalog, gpu: str) -> None:
    budget = estimate(EstimateRequest(model=QWEN, gpu=gpu), catalog)
    assert not any("is read as" in note for note in budget.notes)


def test_a_log_whose_free_memory_exceeds_the_hinted_gpu_keeps_its_budget_without_the_startup_check(
    catalog: Catalog,
) -> None:
    facts = Facts(model=QWEN, free_gib=130.0, max_model_len=4096)
    budget = budget_from_facts(facts, catalog, gpu="A100-80GB")
    assert budget is not None
    assert budget.startup_check is None or budget.startup_check.free_gib is None


def test_a_kv_size_read_from_a_log_is_not_called_over_committed_by_estimated_overheads(
    catalog: Catalog,
) -> None:
    # 78 GiB of KV beside 0.92 GiB of weights fits a 79.25 GiB A100 even if estimated overheads say otherwise.
    facts = Facts(model=QWEN, available_kv_cache_gib=78.0, max_model_len=4096)
    budget = budget_from_facts(facts, catalog, gpu="A100-80GB")
    assert budget is not None and budget.fits is True
