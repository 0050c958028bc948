"""KV-cache arithmetic per architecture family, each figure worked out by hand from vLLM's formulas.

The configs are the checked-in config.json files of models real runs name (tests/models/configs).
The formulas: `FullAttentionSpec.page_size_bytes` = 2 · block · kv_heads · head_size · dtype bytes;
`MLAAttentionSpec` = block · (kv_lora_rank + qk_rope_head_dim) · dtype bytes, one latent (no K/V
pair, no TP split); `MambaSpec` = the sum of its state shapes × dtype sizes, padded to the attention
page once `_align_hybrid_block_size` raised the block (vllm/v1/kv_cache_interface.py,
vllm/platforms/interface.py, vllm/model_executor/layers/mamba/mamba_utils.py in 0.33.0).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from service.budget import budget_from_facts, estimate
from service.budget.config import model_from_config
from service.budget.kv import cdiv
from service.packs.catalog import Catalog
from service.schemas import Budget, EstimateRequest, Facts

CONFIGS = Path(__file__).resolve().parents[1] / "models" / "configs"


def _budget(catalog: Catalog, repo_id: str, **given: object) -> Budget:
    config = json.loads((CONFIGS / f"{repo_id.replace('/', '--')}.json").read_text())
    fields: dict[str, object] = {"gpu": "H200", "max_model_len": 32768, "vllm_version": "0.33.0", **given}
    return estimate(EstimateRequest(model=repo_id, config=config, **fields), catalog)  # type: ignore[arg-type]


def test_gqa_keeps_one_k_and_v_per_kv_head(catalog: Catalog) -> None:
    # Llama-3.1-8B: 32 layers, 8 KV heads of 128, bf16 → 2 · 8 · 128 · 2 B per layer
    budget = _budget(catalog, "meta-llama/Llama-3.1-8B-Instruct")
    assert budget.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    assert (budget.block_size, budget.kv_bytes_per_block) == (16, 131_072 * 16)


def test_tp_beyond_the_kv_heads_replicates_one_head_per_gpu(catalog: Catalog) -> None:
    # TP 16 > 8 KV heads: each GPU keeps one head (vLLM replicates KV heads, MQA-like per GPU)
    budget = _budget(catalog, "meta-llama/Llama-3.1-8B-Instruct", gpus=16, tensor_parallel_size=16)
    assert budget.kv_bytes_per_token == 32 * 2 * 1 * 128 * 2


def test_tp_splits_the_kv_heads(catalog: Catalog) -> None:
    # Qwen3-8B: 36 layers, 8 KV heads of 128; TP 4 leaves 2 heads per GPU
    budget = _budget(catalog, "Qwen/Qwen3-8B", gpus=4, tensor_parallel_size=4)
    assert budget.kv_bytes_per_token == 36 * 2 * 2 * 128 * 2 == 36_864


def test_mla_keeps_one_latent_per_token_whatever_the_tp(catalog: Catalog) -> None:
    # DeepSeek-V3: 61 MLA layers, latent 512 + rope 64, bf16 KV; no KV heads to split
    for tp in (1, 8):
        budget = _budget(catalog, "deepseek-ai/DeepSeek-V3", gpus=tp, tensor_parallel_size=tp)
        assert budget.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272


def test_sliding_and_full_layers_share_one_pool_in_two_groups(catalog: Catalog) -> None:
    # gpt-oss-120b: 36 layers alternating sliding (window 128) and full, 8 KV heads of 64
    budget = _budget(catalog, "openai/gpt-oss-120b")
    page = 16 * 2 * 8 * 64 * 2
    assert budget.kv_bytes_per_token == 36 * 2 * 8 * 64 * 2 == 73_728
    assert budget.kv_bytes_per_block == 18 * page  # 18 layers per group: one full, one sliding group


def test_moe_experts_leave_the_kv_cache_alone(catalog: Catalog) -> None:
    # Qwen3-30B-A3B-FP8: 48 layers, 4 KV heads of 128; the FP8 experts change weights, not KV
    budget = _budget(catalog, "Qwen/Qwen3-30B-A3B-FP8")
    assert budget.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2 == 98_304
    assert budget.quantization == "fp8-block"


def test_fp8_kv_halves_the_page(catalog: Catalog) -> None:
    budget = _budget(catalog, "Qwen/Qwen3-8B", kv_cache_dtype="fp8")
    assert budget.kv_bytes_per_token == 36 * 2 * 8 * 128 * 1


def test_gated_deltanet_layers_keep_a_state_and_raise_the_block(catalog: Catalog) -> None:
    # Qwen3-Next-80B-A3B: 48 layers, every 4th full attention (12), 36 Gated DeltaNet layers.
    # attention page per token: 2 · 2 KV heads · 256 · 2 B = 2048
    # GDN state: conv (2·16·128 + 32·128 = 8192) × 3 · 2 B + recurrent 32 · 128 · 128 · 2 B = 1,097,728
    # block: 16 · cdiv(1,097,728, 16 · 2048) = 16 · 34 = 544 (vLLM logs "attention block size to 544")
    budget = _budget(catalog, "Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert budget.kv_bytes_per_token == 12 * 2048 == 24_576
    assert budget.block_size == 544
    assert budget.kv_bytes_per_block == 12 * 544 * 2048  # groups of 12 layers: 1 attention, 3 GDN


def test_gated_deltanet_state_shards_with_tp(catalog: Catalog) -> None:
    # TP 4: 1 KV head of 256 per GPU → 1024 B per token; state 8192/4 · 3 · 2 + 8 · 128 · 128 · 2 = 274,432
    # block: 16 · cdiv(274,432, 16 · 1024) = 16 · 17 = 272
    budget = _budget(catalog, "Qwen/Qwen3-Next-80B-A3B-Instruct", gpus=4, tensor_parallel_size=4)
    assert budget.kv_bytes_per_token == 12 * 1024
    assert budget.block_size == 272


def test_kimi_delta_attention_keeps_a_float32_state_beside_mla(catalog: Catalog) -> None:
    # Kimi-Linear-48B-A3B: 7 MLA layers (1-based 4, 8, …, 27), 20 KDA layers.
    # MLA page per token: (512 + 64) · 2 B = 1152; KDA state: conv 3 · 32 · 128 · 3 · 2 B = 73,728
    # + recurrent 32 · 128 · 128 · 4 B (float32) = 2,097,152 → 2,170,880
    # MLA hybrids align to 128: block = 128 · cdiv(2,170,880, 128 · 1152) = 128 · 15 = 1920
    budget = _budget(catalog, "moonshotai/Kimi-Linear-48B-A3B-Instruct")
    assert budget.kv_bytes_per_token == 7 * 1152 == 8064
    assert budget.block_size == 1920


def test_mamba2_layers_of_nemotron_h(catalog: Catalog) -> None:
    # Nemotron-Nano-9B-v2: pattern with 4 attention (*), 27 Mamba2 (M), 25 MLP-only (-) layers.
    # attention: 2 · 8 · 128 · 2 B = 4096 per token; Mamba2 state: conv (128·80 + 2·8·128 = 12,288)
    # × 3 · 2 B = 73,728 + recurrent 128 · 80 · 128 · 4 B (float32) = 5,242,880 → 5,316,608
    # block: 16 · cdiv(5,316,608, 16 · 4096) = 16 · 82 = 1312
    budget = _budget(catalog, "nvidia/NVIDIA-Nemotron-Nano-9B-v2")
    assert budget.kv_bytes_per_token == 4 * 4096
    assert budget.block_size == 1312
    assert budget.kv_bytes_per_block == 4 * 1312 * 4096  # group of 4: 1 attention, 7 Mamba groups


def test_a_hybrid_request_needs_one_state_block_per_state_group(catalog: Catalog) -> None:
    # Qwen3-Next at 32,768 tokens: cdiv(32768, 544) = 61 attention blocks + 3 GDN groups × 1 block
    budget = _budget(catalog, "Qwen/Qwen3-Next-80B-A3B-Instruct", kv_cache_memory_bytes=64 * 2**30)
    blocks_per_request = 61 + 3
    assert budget.num_blocks == 64 * 2**30 // budget.kv_bytes_per_block
    assert budget.max_concurrency == pytest.approx(budget.num_blocks / blocks_per_request, abs=1e-4)


def test_gemma3_text_config_defaults_give_its_five_to_one_sliding_pattern(catalog: Catalog) -> None:
    # gemma-3-27b-it's text_config omits vocab_size, max_position_embeddings and the layer pattern:
    # Gemma3TextConfig's defaults (262,208; 131,072; every 6th layer global) apply, as vLLM loads it.
    # 62 layers → 10 global, 52 sliding (window 1024); 16 KV heads of 128 at bf16 = 8192 B per layer.
    budget = _budget(catalog, "google/gemma-3-27b-it", gpu="A100-80GB", max_model_len=8192)
    assert budget.kv_bytes_per_token == 62 * 2 * 16 * 128 * 2 == 507_904
    assert budget.kv_bytes_per_block == 10 * 16 * 8192  # groups of 10 layers: 1 global, 6 sliding
    catalog_budget = estimate(
        EstimateRequest(model="google/gemma-3-27b-it", gpu="A100-80GB", max_model_len=8192), catalog
    )
    assert (catalog_budget.kv_bytes_per_token, catalog_budget.kv_bytes_per_block) == (
        budget.kv_bytes_per_token,
        budget.kv_bytes_per_block,
    )


def test_qwen3_5_text_config_keeps_a_float32_gated_deltanet_state(catalog: Catalog) -> None:
    # Qwen3.6-27B (Qwen3_5ForConditionalGeneration; the layout sits in text_config): 64 layers, every
    # 4th full attention (16) with 4 KV heads of 256, 48 Gated DeltaNet layers of 16 key / 48 value
    # heads of 128. attention per token: 2 · 4 · 256 · 2 B = 4096 per layer.
    # state: conv (2·16·128 + 48·128 = 10,240) × 3 · 2 B = 61,440 + recurrent 48 · 128 · 128 · 4 B
    # (mamba_ssm_dtype float32, which Qwen3_5ForConditionalGenerationConfig makes the cache dtype)
    # = 3,145,728 → 3,207,168; block: 16 · cdiv(3,207,168, 16 · 4096) = 16 · 49 = 784
    budget = _budget(catalog, "Qwen/Qwen3.6-27B", gpu="A100-80GB")
    assert budget.kv_bytes_per_token == 16 * 4096 == 65_536
    assert budget.block_size == 784
    assert budget.kv_bytes_per_block == 16 * 784 * 4096  # groups of 16: 1 attention, 3 GDN


def test_qwen3_5_moe_reads_its_rope_parameters_and_experts(catalog: Catalog) -> None:
    # Qwen3.6-35B-A3B: 40 layers (10 full attention, 2 KV heads of 256), 256 experts of 512, top 8;
    # transformers 5's rope_parameters carry the theta and the partial rotary factor 0.25
    config = json.loads((CONFIGS / "Qwen--Qwen3.6-35B-A3B.json").read_text())
    spec, quant = model_from_config(config, "Qwen/Qwen3.6-35B-A3B")
    assert quant is None and spec.moe is not None and spec.state is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.intermediate_size) == (256, 8, 512)
    assert spec.rope is not None and (spec.rope.theta, spec.rope.partial_rotary_factor) == (1e7, 0.25)
    assert (len(spec.state.attention_layers), len(spec.state.state_layers)) == (10, 30)
    assert spec.state.float32_state and spec.mtp_layers == 1


def _qwen36_tp2(catalog: Catalog, **given: object) -> Budget:
    fields: dict[str, object] = {
        "gpu": "RTX-3090",
        "gpus": 2,
        "tensor_parallel_size": 2,
        "dtype": "float16",
        "kv_cache_dtype": "fp8_e5m2",
        "max_model_len": 262_144,
        "vllm_version": "0.24.0",
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 3},
        **given,
    }
    config = json.loads((CONFIGS / "Qwen--Qwen3.6-27B.json").read_text())
    request = msgspec.convert({"model": "Qwen/Qwen3.6-27B", "config": config, **fields}, EstimateRequest)
    return estimate(request, catalog)


# TP 2, fp8 KV, MTP with 3 drafted tokens: attention 2 · 2 · 256 · 1 B = 1024 per token and layer, 17
# attention layers (16 + the MTP layer's); GDN conv (10,240 / 2) × (3 + 3 drafted) · 2 B = 61,440
# + recurrent 24 · 128 · 128 · 4 B = 1,572,864 → 1,634,304; block 16 · cdiv(1,634,304, 16 · 1024)
# = 1600; a block costs 17 · 1600 · 1024 B; a 262,144-token request holds cdiv(262,144, 1600) = 164
# attention blocks + 3 GDN groups × its state pages.
_BLOCK_BYTES = 17 * 1600 * 1024


def test_drafted_tokens_widen_the_conv_state_and_raise_the_block(catalog: Catalog) -> None:
    budget = _qwen36_tp2(catalog)
    assert (budget.block_size, budget.kv_bytes_per_block) == (1600, _BLOCK_BYTES)
    assert _qwen36_tp2(catalog, speculative_config=None).block_size == 16 * cdiv(
        5120 * 3 * 2 + 1_572_864, 16 * 1024
    )


@pytest.mark.parametrize(
    ("given", "state_pages"),
    [
        # since 0.15 (mamba_cache_mode): prefix caching ("align") keeps 2 + drafted pages, else 1 + drafted
        ({"enable_prefix_caching": True}, 2 + 3),
        ({"enable_prefix_caching": False}, 1 + 3),
        ({}, 1 + 3),  # a hybrid's prefix caching is off unless asked for
        # before 0.15 one page per request, whatever the drafter
        ({"enable_prefix_caching": True, "vllm_version": "0.14.1"}, 1),
    ],
)
def test_a_request_holds_the_state_pages_of_its_mamba_cache_mode(
    catalog: Catalog, given: dict[str, object], state_pages: int
) -> None:
    per_request = 164 + 3 * state_pages
    budget = _qwen36_tp2(catalog, kv_cache_memory_bytes=2 * per_request * _BLOCK_BYTES, **given)
    assert budget.num_blocks == 2 * per_request
    assert budget.max_concurrency == pytest.approx(2.0)


@pytest.mark.parametrize(("stated", "state_pages"), [(True, 2), (None, 1)])
def test_a_log_that_states_prefix_caching_sizes_the_state_pages_by_it(
    catalog: Catalog, stated: bool | None, state_pages: int
) -> None:
    # Qwen3.6-27B at TP 2, fp8_e5m2 KV, no drafter: block 16 · cdiv(5120 · 3 · 2 + 1,572,864, 16 · 1024)
    # = 1568; a block costs 16 · 1568 · 1024 B; a request holds cdiv(262,144, 1568) = 168 attention
    # blocks + 3 GDN groups × its state pages. A log's non-default args (or --enable-prefix-caching)
    # state prefix caching; unstated, a hybrid's default is off.
    block_bytes = 16 * 1568 * 1024
    per_request = 168 + 3 * state_pages
    facts = Facts(
        gpu_name="RTX-3090",
        tensor_parallel_size=2,
        dtype="float16",
        kv_cache_dtype="fp8_e5m2",
        max_model_len=262_144,
        vllm_version="0.24.0",
        enable_prefix_caching=stated,
        available_kv_cache_gib=2 * per_request * block_bytes / 2**30,
    )
    config = json.loads((CONFIGS / "Qwen--Qwen3.6-27B.json").read_text())
    budget = budget_from_facts(facts, catalog, model="Qwen/Qwen3.6-27B", config=config)
    assert budget is not None and budget.block_size == 1568
    assert budget.max_concurrency == pytest.approx(2.0)
