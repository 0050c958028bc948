"""Speculative decoding: the drafter's weights and KV cache join the budget (MTP layers or a draft model)."""

from __future__ import annotations

import pytest

from service.budget import estimate
from service.errors import InvalidConfigError, UnknownModelError
from service.packs.catalog import Catalog
from service.schemas import Budget, EstimateRequest, SpeculativeConfig

DEEPSEEK = "DeepSeek-V3"  # ships one MTP layer (num_nextn_predict_layers 1)
LLAMA_70B = "Llama-3.1-70B-Instruct"
DRAFT = "Llama-3.2-1B-Instruct"


def _budget(catalog: Catalog, model: str, gpus: int, spec: SpeculativeConfig | None = None) -> Budget:
    request = EstimateRequest(
        model=model, gpu="H200", gpus=gpus, vllm_version="0.33.0", speculative_config=spec, max_model_len=8192
    )
    return estimate(request, catalog)


def test_mtp_adds_one_target_layer_of_kv_per_mtp_layer(catalog: Catalog) -> None:
    plain = _budget(catalog, DEEPSEEK, 8)
    mtp = _budget(catalog, DEEPSEEK, 8, SpeculativeConfig(method="mtp", num_speculative_tokens=1))
    per_layer = plain.kv_bytes_per_token // 61
    assert mtp.kv_bytes_per_token == plain.kv_bytes_per_token + per_layer
    assert mtp.draft_kv_bytes_per_token == per_layer


def test_more_speculative_tokens_reuse_the_mtp_layers_rather_than_add_kv(catalog: Catalog) -> None:
    one = _budget(catalog, DEEPSEEK, 8, SpeculativeConfig(method="deepseek_mtp", num_speculative_tokens=1))
    three = _budget(catalog, DEEPSEEK, 8, SpeculativeConfig(method="deepseek_mtp", num_speculative_tokens=3))
    assert (three.kv_bytes_per_token, three.weights_gib) == (one.kv_bytes_per_token, one.weights_gib)


def test_mtp_weights_are_one_more_decoder_layer_on_each_gpu(catalog: Catalog) -> None:
    plain = _budget(catalog, DEEPSEEK, 8)
    mtp = _budget(catalog, DEEPSEEK, 8, SpeculativeConfig(method="mtp"))
    # a DeepSeek-V3 MoE layer is about 11.4 B fp8 parameters: ~1.3 GiB per GPU at TP 8, plus eh_proj
    assert 1.2 < mtp.draft_weights_gib < 1.8
    assert mtp.weights_gib == pytest.approx(plain.weights_gib + mtp.draft_weights_gib, abs=1e-3)
    assert mtp.kv_cache_tokens < plain.kv_cache_tokens


def test_mtp_on_a_model_without_mtp_layers_is_a_clear_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="num_nextn_predict_layers"):
        _budget(catalog, LLAMA_70B, 4, SpeculativeConfig(method="mtp"))


def test_a_draft_model_adds_its_own_weights_and_kv_at_the_targets_tp(catalog: Catalog) -> None:
    plain = _budget(catalog, LLAMA_70B, 4)
    drafted = _budget(catalog, LLAMA_70B, 4, SpeculativeConfig(model=DRAFT, num_speculative_tokens=4))
    alone = estimate(
        EstimateRequest(model=DRAFT, gpu="H200", gpus=4, tensor_parallel_size=4, vllm_version="0.33.0"),
        catalog,
    )
    assert drafted.draft_weights_gib == pytest.approx(alone.weights_gib, abs=1e-3)
    assert drafted.draft_kv_bytes_per_token == alone.kv_bytes_per_token
    assert drafted.kv_bytes_per_token == plain.kv_bytes_per_token + alone.kv_bytes_per_token


def test_prompt_lookup_methods_need_no_memory(catalog: Catalog) -> None:
    plain = _budget(catalog, LLAMA_70B, 4)
    ngram = _budget(catalog, LLAMA_70B, 4, SpeculativeConfig(method="ngram", num_speculative_tokens=4))
    assert (ngram.weights_gib, ngram.kv_bytes_per_token, ngram.kv_cache_tokens) == (
        plain.weights_gib,
        plain.kv_bytes_per_token,
        plain.kv_cache_tokens,
    )


def test_an_unknown_draft_model_names_the_closest_catalog_models(catalog: Catalog) -> None:
    with pytest.raises(UnknownModelError):
        _budget(catalog, LLAMA_70B, 4, SpeculativeConfig(model="no-such-draft-zz9"))


def test_zero_speculative_tokens_is_refused(catalog: Catalog) -> None:
    with pytest.raises(InvalidConfigError, match="num_speculative_tokens"):
        _budget(catalog, DEEPSEEK, 8, SpeculativeConfig(method="mtp", num_speculative_tokens=0))
