"""The estimator's arithmetic by attention type, parallelism, inversions, inputs and errors."""

from __future__ import annotations

import pickle
import subprocess
import sys

import msgspec
import pytest

from service.budget import GIB, budget_from_facts, estimate
from service.errors import InvalidConfigError, UnknownGpuError, UnknownModelError
from service.packs.catalog import Catalog, OverheadFit
from service.schemas import EstimateRequest, Facts

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_8B_CONFIG: dict[str, object] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _estimate(catalog: Catalog, **fields: object) -> object:
    fields.setdefault("vllm_version", "0.32.0")
    return estimate(EstimateRequest(**fields), catalog)  # type: ignore[arg-type]


def test_pasted_config_json_gives_the_same_weights_and_kv_as_the_catalog(catalog: Catalog) -> None:
    from_catalog = estimate(EstimateRequest(model=LLAMA_8B, gpu="H100", vllm_version="0.32.0"), catalog)
    from_config = estimate(
        EstimateRequest(config=LLAMA_8B_CONFIG, gpu="H100", vllm_version="0.32.0"), catalog
    )
    assert from_config.weights_gib == from_catalog.weights_gib
    assert from_config.kv_bytes_per_token == from_catalog.kv_bytes_per_token
    assert from_config.num_blocks == from_catalog.num_blocks
    assert from_config.sources["weights_gib"].kind == "given"


def test_config_json_without_layers_is_a_one_sentence_input_error(catalog: Catalog) -> None:
    config = {k: v for k, v in LLAMA_8B_CONFIG.items() if k != "num_hidden_layers"}
    with pytest.raises(InvalidConfigError, match="num_hidden_layers"):
        estimate(EstimateRequest(config=config, gpu="H100"), catalog)


def test_config_json_quantization_is_read(catalog: Catalog) -> None:
    config = {**LLAMA_8B_CONFIG, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    budget = estimate(EstimateRequest(config=config, gpu="L4", vllm_version="0.32.0"), catalog)
    assert budget.quantization == "awq"
    assert 5.0 < budget.weights_gib < 5.8


def test_unknown_model_suggests_closest_catalog_ids(catalog: Catalog) -> None:
    with pytest.raises(UnknownModelError) as caught:
        estimate(EstimateRequest(model="meta-llama/Llama-3.1-8B-Instrct", gpu="H100"), catalog)
    assert "meta-llama/Llama-3.1-8B-Instruct" in caught.value.suggestions
    assert "config.json" in str(caught.value)


def test_unknown_gpu_suggests_catalog_names(catalog: Catalog) -> None:
    with pytest.raises(UnknownGpuError) as caught:
        estimate(EstimateRequest(model=LLAMA_8B, gpu="H1000"), catalog)
    assert caught.value.suggestions


def test_closest_names_are_ranked_only_when_the_error_is_read() -> None:
    ranked: list[str] = []

    def closest() -> list[str]:
        ranked.append("ranked")
        return ["meta-llama/Llama-3.1-8B-Instruct"]

    error = UnknownModelError("meta-llama/Llama-3.1-8B-Instrct", closest)
    assert ranked == []  # a caller that drops the error never pays for the ranking
    assert "Closest catalog ids: meta-llama/Llama-3.1-8B-Instruct." in str(error)
    assert error.suggestions == ["meta-llama/Llama-3.1-8B-Instruct"]
    assert ranked == ["ranked"]


def test_unknown_name_errors_pickle_with_their_message(catalog: Catalog) -> None:
    for request in (
        EstimateRequest(model="meta-llama/Llama-3.1-8B-Instrct", gpu="H100"),
        EstimateRequest(model=LLAMA_8B, gpu="H1000"),
    ):
        with pytest.raises((UnknownModelError, UnknownGpuError)) as caught:
            estimate(request, catalog)
        copy = pickle.loads(pickle.dumps(caught.value))
        assert (type(copy), str(copy), copy.suggestions) == (
            type(caught.value),
            str(caught.value),
            caught.value.suggestions,
        )


@pytest.mark.parametrize("gpu", ["NVIDIA A100-SXM4-80GB", "a100 80gb", "A100-SXM4-80GB"])
def test_gpu_is_found_by_nvml_name_or_alias(catalog: Catalog, gpu: str) -> None:
    assert estimate(EstimateRequest(model=LLAMA_8B, gpu=gpu), catalog).total_gib == 79.25


def test_gpu_given_as_gib_number_string(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="48"), catalog)
    assert budget.total_gib == 48.0 and budget.sources["total_gib"].kind == "given"


def test_no_gpu_at_all_is_an_input_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="Name a GPU"):
        estimate(EstimateRequest(model=LLAMA_8B), catalog)


def test_heads_not_divisible_by_tp_uses_vllm_sentence(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match=r"must be divisible by tensor parallel size \(3\)"):
        estimate(EstimateRequest(model=LLAMA_8B, gpu="H100", tensor_parallel_size=3), catalog)


@pytest.mark.parametrize("bad", [{"gpu_memory_utilization": 1.5}, {"max_model_len": 0}, {"free_gib": -1.0}])
def test_out_of_range_values_are_input_errors(catalog: Catalog, bad: dict[str, float]) -> None:
    with pytest.raises(InvalidConfigError):
        estimate(EstimateRequest(model=LLAMA_8B, gpu="H100", **bad), catalog)  # type: ignore[arg-type]


def test_kv_heads_replicate_when_tp_exceeds_them(catalog: Catalog) -> None:
    # Llama-3.1-8B has 8 KV heads: TP 8 gives 1 head per GPU, TP 16 still 1 (replicated), never 0.
    tp1, tp8, tp16 = (
        estimate(EstimateRequest(model="Llama-3.1-8B-Instruct", gpu="L4", tensor_parallel_size=tp), catalog)
        for tp in (1, 8, 16)
    )
    assert tp8.kv_bytes_per_token == tp1.kv_bytes_per_token // 8
    assert tp16.kv_bytes_per_token == tp8.kv_bytes_per_token


def test_tensor_parallel_splits_weights(catalog: Catalog) -> None:
    one = estimate(
        EstimateRequest(model="Llama-3.1-70B-Instruct", gpu="H100", tensor_parallel_size=1), catalog
    )
    four = estimate(EstimateRequest(model="Llama-3.1-70B-Instruct", gpu="H100", gpus=4), catalog)
    assert four.tensor_parallel_size == 4
    assert four.weights_gib == pytest.approx(one.weights_gib / 4, rel=0.01)
    assert not one.fits and four.fits


def test_pipeline_parallel_reports_the_fullest_stage(catalog: Catalog) -> None:
    budget = estimate(
        EstimateRequest(model="Llama-3.1-70B-Instruct", gpu="H100", pipeline_parallel_size=4, gpus=4), catalog
    )
    assert budget.pipeline_parallel_size == 4
    assert 30 < budget.weights_gib < 35  # 20 of 80 layers plus the embedding or the head


def test_mla_caches_one_latent_per_token_and_layer_unsplit_by_tp(catalog: Catalog) -> None:
    tp8 = estimate(EstimateRequest(model="deepseek-ai/DeepSeek-V3", gpu="H200", gpus=8), catalog)
    assert tp8.kv_bytes_per_token == 61 * (512 + 64) * 2
    fp8 = estimate(
        EstimateRequest(model="DeepSeek-V3", gpu="H200", gpus=8, kv_cache_dtype="fp8_ds_mla"), catalog
    )
    assert fp8.kv_bytes_per_token == 61 * 656


def test_fp8_ds_mla_on_a_non_mla_model_is_an_input_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="MLA"):
        estimate(EstimateRequest(model=LLAMA_8B, gpu="H100", kv_cache_dtype="fp8_ds_mla"), catalog)


def test_fp8_kv_cache_halves_bytes_per_token(catalog: Catalog) -> None:
    auto = estimate(EstimateRequest(model=LLAMA_8B, gpu="H100"), catalog)
    fp8 = estimate(EstimateRequest(model=LLAMA_8B, gpu="H100", kv_cache_dtype="fp8"), catalog)
    assert fp8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token


def test_sliding_window_layers_form_their_own_groups_and_need_a_window_per_request(catalog: Catalog) -> None:
    # gpt-oss: 12 sliding (window 128) + 12 full layers -> 2 groups of 12; a block spans 12 pages.
    budget = estimate(
        EstimateRequest(
            model="openai/gpt-oss-20b",
            gpu="H100",
            kv_cache_memory_bytes=4 * GIB,
            max_model_len=32768,
            max_num_batched_tokens=2048,
            vllm_version="0.32.0",
        ),
        catalog,
    )
    page = 16 * 2 * 8 * 64 * 2
    assert budget.kv_bytes_per_block == page * 12
    assert budget.num_blocks == 4 * GIB // (page * 12)
    full_blocks = 32768 // 16
    sliding_blocks = -(-(128 - 1 + 2048) // 16) + 1
    assert budget.max_concurrency == pytest.approx(
        budget.num_blocks / (full_blocks + sliding_blocks), abs=1e-4
    )


def test_before_the_hybrid_manager_sliding_layers_count_as_full(catalog: Catalog) -> None:
    old = estimate(
        EstimateRequest(
            model="google/gemma-2-9b-it", gpu="H100", kv_cache_memory_bytes=4 * GIB, vllm_version="0.9.2"
        ),
        catalog,
    )
    new = estimate(
        EstimateRequest(
            model="google/gemma-2-9b-it", gpu="H100", kv_cache_memory_bytes=4 * GIB, vllm_version="0.32.0"
        ),
        catalog,
    )
    assert old.kv_bytes_per_block == 16 * 2 * 8 * 256 * 2 * 42
    assert new.kv_bytes_per_block == 16 * 2 * 8 * 256 * 2 * 21
    assert new.max_model_len_fit >= old.max_model_len_fit


def test_moe_weights_count_every_expert_not_only_active_ones(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model="Qwen/Qwen3-30B-A3B", gpu="H100", vllm_version="0.32.0"), catalog)
    assert budget.weights_gib == pytest.approx(30_532_122_624 * 2 / GIB, rel=0.01)


def test_mxfp4_quantizes_only_the_experts_of_gpt_oss(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model="openai/gpt-oss-20b", gpu="H100"), catalog)
    assert budget.quantization == "mxfp4"
    assert 12.0 < budget.weights_gib < 14.0


def test_awq_checkpoint_is_about_a_third_of_bf16(catalog: Catalog) -> None:
    awq = estimate(
        EstimateRequest(model="hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", gpu="L4"), catalog
    )
    bf16 = estimate(EstimateRequest(model=LLAMA_8B, gpu="L4"), catalog)
    assert awq.quantization == "awq"
    assert 0.3 < awq.weights_gib / bf16.weights_gib < 0.4


def test_largest_max_model_len_is_the_inverse_of_the_capacity_check(catalog: Catalog) -> None:
    request = EstimateRequest(
        model=LLAMA_8B, gpu="A10G", kv_cache_memory_bytes=GIB, block_size=16, vllm_version="0.32.0"
    )
    budget = estimate(request, catalog)
    assert budget.max_model_len_fit == (GIB // (2 * 1024 * 1024) - 1) * 16
    at_fit = estimate(
        EstimateRequest(
            model=LLAMA_8B,
            gpu="A10G",
            kv_cache_memory_bytes=GIB,
            max_model_len=budget.max_model_len_fit,
            vllm_version="0.32.0",
        ),
        catalog,
    )
    one_more = estimate(
        EstimateRequest(
            model=LLAMA_8B,
            gpu="A10G",
            kv_cache_memory_bytes=GIB,
            max_model_len=budget.max_model_len_fit + 1,
            vllm_version="0.32.0",
        ),
        catalog,
    )
    assert at_fit.fits and not one_more.fits


def test_smallest_utilization_that_fits_fits_and_one_step_less_does_not(catalog: Catalog) -> None:
    base = dict(model=LLAMA_8B, gpu="A10G", max_model_len=32768, vllm_version="0.32.0")
    budget = estimate(EstimateRequest(**base), catalog)  # type: ignore[arg-type]
    util = budget.min_gpu_memory_utilization
    assert util is not None
    assert estimate(EstimateRequest(gpu_memory_utilization=util, **base), catalog).fits  # type: ignore[arg-type]
    lower = round(util - 0.01, 2)
    assert not estimate(EstimateRequest(gpu_memory_utilization=lower, **base), catalog).fits  # type: ignore[arg-type]


def test_smallest_tensor_parallel_size_that_holds_the_weights(catalog: Catalog) -> None:
    budget = estimate(
        EstimateRequest(model="Llama-3.1-70B-Instruct", gpu="A100-80GB", max_model_len=8192), catalog
    )
    assert budget.min_tensor_parallel_size == 2
    assert estimate(
        EstimateRequest(
            model="Llama-3.1-70B-Instruct", gpu="A100-80GB", max_model_len=8192, tensor_parallel_size=2
        ),
        catalog,
    ).fits


def test_max_concurrency_at_a_given_length(catalog: Catalog) -> None:
    budget = estimate(
        EstimateRequest(model=LLAMA_8B, gpu="H100", kv_cache_memory_bytes=8 * GIB, max_model_len=8192),
        catalog,
    )
    assert budget.num_blocks == 4096
    assert budget.max_concurrency == pytest.approx(4096 / 512)


def test_pool_tokens_follow_the_version_formula(catalog: Catalog) -> None:
    # 0.9-0.20: num_blocks // groups × block; 0.21+: int(concurrency × max_model_len). Uniform: same.
    request = dict(model=LLAMA_8B, gpu="H100", kv_cache_memory_bytes=8 * GIB, max_model_len=8192)
    old = estimate(EstimateRequest(vllm_version="0.12.0", **request), catalog)  # type: ignore[arg-type]
    new = estimate(EstimateRequest(vllm_version="0.32.0", **request), catalog)  # type: ignore[arg-type]
    assert old.kv_cache_tokens == new.kv_cache_tokens == 4096 * 16


def test_default_utilization_is_090_before_020_and_092_after(catalog: Catalog) -> None:
    assert (
        estimate(
            EstimateRequest(model=LLAMA_8B, gpu="H100", vllm_version="0.19.1"), catalog
        ).gpu_memory_utilization
        == 0.9
    )
    assert (
        estimate(
            EstimateRequest(model=LLAMA_8B, gpu="H100", vllm_version="0.20.0"), catalog
        ).gpu_memory_utilization
        == 0.92
    )


def _with_graph_memory(catalog: Catalog, gib: float) -> Catalog:
    """The catalog with every era's CUDA-graph estimate at a fixed `gib`, whatever the fit found."""
    graph = OverheadFit(coefficients=[gib, 0.0], spread_gib=0.1, runs=1)
    eras = [msgspec.structs.replace(e, cuda_graph=graph) for e in catalog.engine.overheads]
    return msgspec.structs.replace(catalog, engine=msgspec.structs.replace(catalog.engine, overheads=eras))


def test_cuda_graphs_leave_the_kv_budget_from_020_unless_enforce_eager(catalog: Catalog) -> None:
    graphs = _with_graph_memory(catalog, 0.75)
    base = dict(model=LLAMA_8B, gpu="H100", gpu_memory_utilization=0.9)
    old = estimate(EstimateRequest(vllm_version="0.19.0", **base), graphs)  # type: ignore[arg-type]
    new = estimate(EstimateRequest(vllm_version="0.20.0", **base), graphs)  # type: ignore[arg-type]
    eager = estimate(EstimateRequest(vllm_version="0.20.0", enforce_eager=True, **base), graphs)  # type: ignore[arg-type]
    assert new.cuda_graph_gib == old.cuda_graph_gib == 0.75 and eager.cuda_graph_gib == 0
    assert new.available_kv_gib == pytest.approx(eager.available_kv_gib - 0.75, abs=1e-3)
    assert old.sources["cuda_graph_gib"].note == "not subtracted from the KV budget in this version"
    assert new.sources["cuda_graph_gib"].note is None


def test_every_figure_names_its_source(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="H100"), catalog)
    assert budget.sources["kv_bytes_per_token"].kind == "exact"
    assert budget.sources["weights_gib"].kind == "catalog"
    activation = budget.sources["activation_peak_gib"]
    assert activation.kind == "estimated" and activation.uncertainty_gib
    assert any("assumed" in note for note in budget.notes)


def test_budget_from_facts_uses_the_kv_memory_the_log_reported(catalog: Catalog) -> None:
    facts = Facts(
        model="Qwen/Qwen2.5-0.5B-Instruct",
        total_gib=22.05,
        available_kv_cache_gib=0.015625,
        max_model_len=2048,
        dtype="float16",
        vllm_version="0.32.0",
    )
    budget = budget_from_facts(facts, catalog)
    assert budget is not None
    assert budget.num_blocks == 85 and budget.max_model_len_fit == 1344


def test_budget_from_facts_is_none_without_a_known_model(catalog: Catalog) -> None:
    assert budget_from_facts(Facts(total_gib=80.0), catalog) is None
    assert budget_from_facts(Facts(model="no/such-model", total_gib=80.0), catalog) is None


def test_budget_core_imports_no_framework() -> None:
    code = (
        "import sys, service.budget, service.packs.catalog; "
        "bad = [m for m in ('litestar', 'redis', 'slack_bolt', 'httpx', 'aiohttp') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_more_pipeline_stages_than_layers_is_an_input_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="exceeds the model's 24 layers"):
        estimate(EstimateRequest(model="Qwen2.5-0.5B-Instruct", gpu="L4", pipeline_parallel_size=25), catalog)


@pytest.mark.parametrize(
    "config",
    [
        {**LLAMA_8B_CONFIG, "num_hidden_layers": -3},
        {**LLAMA_8B_CONFIG, "num_attention_heads": 0},
        {**LLAMA_8B_CONFIG, "vocab_size": "lots"},
        {**LLAMA_8B_CONFIG, "num_key_value_heads": 7},
        {**LLAMA_8B_CONFIG, "rope_scaling": {"rope_type": "llama3", "factor": "eight"}},
        {**LLAMA_8B_CONFIG, "quantization_config": {"quant_method": "mystery"}},
    ],
)
def test_hostile_config_values_are_one_sentence_input_errors(
    catalog: Catalog, config: dict[str, object]
) -> None:
    try:
        budget = estimate(EstimateRequest(config=config, gpu="H100"), catalog)
    except InvalidConfigError as exc:
        assert str(exc).endswith(".") and "\n" not in str(exc)
    else:
        assert budget.weights_gib > 0  # an unusable optional field falls back to its default


def test_prime_head_count_does_not_make_the_tp_search_slow(catalog: Catalog) -> None:
    config = {
        **LLAMA_8B_CONFIG,
        "num_attention_heads": 1_000_003,
        "num_key_value_heads": 1_000_003,
        "head_dim": 4,
        "hidden_size": 4096,
    }
    budget = estimate(EstimateRequest(config=config, gpu="H100"), catalog)
    assert budget.min_tensor_parallel_size in (1, None)


def test_quantized_72b_checkpoints_use_their_padded_mlp(catalog: Catalog) -> None:
    # at TP 1: the unpadded 29568 splits into whole AWQ groups only on one GPU (14784 % 128 != 0)
    awq = estimate(EstimateRequest(model="Qwen/Qwen2.5-72B-Instruct-AWQ", gpu="H100"), catalog)
    unpadded = EstimateRequest(model="Qwen2.5-72B-Instruct", gpu="H100", quantization="awq")
    bf16_like = estimate(unpadded, catalog)
    assert awq.weights_gib > bf16_like.weights_gib


def test_no_utilization_advice_when_kv_cache_memory_bytes_overrides_it(catalog: Catalog) -> None:
    budget = estimate(EstimateRequest(model=LLAMA_8B, gpu="H100", kv_cache_memory_bytes=GIB), catalog)
    assert budget.min_gpu_memory_utilization is None
    assert budget.sources["num_blocks"].kind == "exact"


def test_mxfp4_experts_below_hopper_pad_the_intermediate_size_for_marlin(catalog: Catalog) -> None:
    hopper = estimate(EstimateRequest(model="openai/gpt-oss-20b", gpu="H100"), catalog)
    ampere = estimate(EstimateRequest(model="openai/gpt-oss-20b", gpu="A100-SXM4-80GB"), catalog)
    # 24 layers x 32 experts x 3 matrices x (2944 - 2880) padded rows x 3072 padded hidden, at mxfp4
    padding = 24 * 32 * 3 * (2944 - 2880) * 3072 * (0.5 + 1 / 32)
    assert ampere.weights_gib - hopper.weights_gib == pytest.approx(padding / GIB, abs=1e-4)


def test_fp8_checkpoint_that_quantizes_only_the_mlp_keeps_attention_and_edge_layers_in_bf16(
    catalog: Catalog,
) -> None:
    meta = estimate(
        EstimateRequest(model="meta-llama/Llama-3.1-405B-Instruct-FP8", gpu="H100", gpus=8), catalog
    )
    everything = estimate(
        EstimateRequest(model="meta-llama/Llama-3.1-405B-Instruct", gpu="H100", gpus=8, quantization="fp8"),
        catalog,
    )
    h, kv, inter, tp = 16384, 1024, 53248, 8
    attention = (2 * h * h + 2 * h * kv) // tp
    mlp = 3 * h * inter // tp
    # one extra byte per element for 126 layers' attention and the first and last layers' MLP
    assert meta.weights_gib - everything.weights_gib == pytest.approx(
        (126 * attention + 2 * mlp) / GIB, abs=1e-3
    )
    assert meta.tensor_parallel_size == 8


def test_estimated_max_model_len_searches_up_to_a_configured_length_beyond_the_models_own(
    catalog: Catalog,
) -> None:
    # Qwen3-30B-A3B derives 40,960; with VLLM_ALLOW_LONG_MAX_MODEL_LEN a user may ask for 221,000,
    # and vLLM's binary search then runs up to 221,000 (48 KiB per token in fp8).
    budget = estimate(
        EstimateRequest(
            model="Qwen/Qwen3-30B-A3B-FP8",
            gpu="H100",
            kv_cache_dtype="fp8",
            kv_cache_memory_bytes=6 * GIB,
            max_model_len=221_000,
            vllm_version="0.10.2",
        ),
        catalog,
    )
    assert budget.max_model_len_fit == 6 * GIB // (48 * 1024 * 16) * 16
    assert not budget.fits


def test_the_llm_class_profiles_a_larger_batch_than_vllm_serve(catalog: Catalog) -> None:
    # Llama 2's 32k vocabulary keeps the sampler warm-up below the forward pass, so the profile
    # peak is the batch; a large-vocabulary model may peak at the sampler under both entry points
    serve = estimate(EstimateRequest(model="meta-llama/Llama-2-7b-hf", gpu="H100"), catalog)
    offline = estimate(
        EstimateRequest(model="meta-llama/Llama-2-7b-hf", gpu="H100", entrypoint="llm"), catalog
    )
    assert offline.activation_peak_gib > serve.activation_peak_gib
    assert offline.available_kv_gib < serve.available_kv_gib
    assert any("LLM(...) schedules 16384 tokens" in note for note in offline.notes)
