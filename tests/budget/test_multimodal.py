"""The vision encoder's profiling reserve: a separate term for models whose config has a vision tower."""

from __future__ import annotations

import msgspec

from service.budget import estimate
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

GEMMA_VLM = "gemma-3-4b-it"  # SigLIP 896/14 tower, 256 tokens per image

GEMMA_CONFIG: dict[str, object] = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "mm_tokens_per_image": 256,
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_attention_heads": 8,
        "num_hidden_layers": 34,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "torch_dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "image_size": 896,
    },
}


def _request(**fields: object) -> EstimateRequest:
    return EstimateRequest(gpu="H100", vllm_version="0.33.0", max_model_len=32768, **fields)  # type: ignore[arg-type]


def test_a_vision_model_reserves_the_encoders_profile_and_says_how_vllm_sizes_it(catalog: Catalog) -> None:
    budget = estimate(_request(model=GEMMA_VLM), catalog)
    assert budget.encoder_profile_gib > 0
    source = budget.sources["encoder_profile_gib"]
    assert source.kind == "estimated" and source.note is not None
    # the encoder budget is max_num_batched_tokens (8192 on an H100) of 256-token images
    assert "32 images of 256 tokens" in source.note


def test_the_reserve_comes_out_of_the_kv_cache(catalog: Catalog) -> None:
    budget = estimate(_request(model=GEMMA_VLM), catalog)
    fixed = (
        budget.weights_gib
        + budget.non_torch_gib
        + budget.activation_peak_gib
        + budget.cuda_graph_gib
        + budget.encoder_profile_gib
    )
    assert abs(budget.available_kv_gib - (budget.requested_gib - fixed)) < 1e-3


def test_fewer_batched_tokens_profile_fewer_images(catalog: Catalog) -> None:
    wide = estimate(_request(model=GEMMA_VLM), catalog)
    narrow = estimate(_request(model=GEMMA_VLM, max_num_batched_tokens=512), catalog)
    assert narrow.encoder_profile_gib < wide.encoder_profile_gib
    assert "2 images of 256 tokens" in (narrow.sources["encoder_profile_gib"].note or "")


def test_a_text_only_model_has_no_encoder_term(catalog: Catalog) -> None:
    budget = estimate(_request(model="Llama-3.1-8B-Instruct"), catalog)
    assert budget.encoder_profile_gib == 0 and "encoder_profile_gib" not in budget.sources


def test_a_pasted_config_with_a_vision_config_gets_the_same_term(catalog: Catalog) -> None:
    pasted = estimate(_request(config=GEMMA_CONFIG, model="google/gemma-3-4b-it"), catalog)
    assert pasted.encoder_profile_gib > 0
    no_tower = {k: v for k, v in GEMMA_CONFIG.items() if k != "vision_config"}
    assert estimate(_request(config=no_tower), catalog).encoder_profile_gib == 0
    dynamic = msgspec.structs.replace(
        _request(), config={**GEMMA_CONFIG, "vision_config": {"hidden_size": 1280}}
    )
    assert estimate(dynamic, catalog).encoder_profile_gib == 0
