"""Vision towers read from any config.json shape, counted layer by layer as vLLM's tower classes build them.

Each expected count is written out from the vLLM module's layers (names in the comments), for
synthetic configs shaped like the released ones; the tower's share is the count with the
vision_config minus the count without it.
"""

from __future__ import annotations

from service.budget import estimate, parameter_count
from service.budget.config import model_from_config
from service.packs.catalog import Catalog
from service.schemas import EstimateRequest

QWEN25_TEXT: dict[str, object] = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 128000,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
# Qwen2.5-VL shape: the vision_config names no model_type, so the outer one says which tower
QWEN25_VL: dict[str, object] = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    **QWEN25_TEXT,
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
    },
}
# Qwen2-VL shape: the ViT width is embed_dim and its MLP width mlp_ratio × that; hidden_size is
# the merger's output (the text model's width)
QWEN2_VL: dict[str, object] = {
    **QWEN25_VL,
    "model_type": "qwen2_vl",
    "vision_config": {
        "depth": 32,
        "embed_dim": 1280,
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_chans": 3,
        "hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
# Mistral-Small-3.1 shape: a Pixtral tower (vision model_type) behind Mistral 3's projector, whose
# spatial_merge_size sits in the outer config
MISTRAL3: dict[str, object] = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "model_type": "mistral3",
    "spatial_merge_size": 2,
    "multimodal_projector_bias": False,
    "projector_hidden_act": "gelu",
    "text_config": {
        "model_type": "mistral",
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 131072,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000000.0,
        "torch_dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "pixtral",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "head_dim": 64,
        "patch_size": 14,
        "image_size": 1540,
        "num_channels": 3,
    },
}


# Qwen3-VL shape: learned positions of their own number, deepstack mergers
QWEN3_VL: dict[str, object] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "text_config": {**QWEN25_TEXT, "model_type": "qwen3", "hidden_size": 4096, "head_dim": 128},
    "vision_config": {
        "model_type": "qwen3_vl",
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "in_channels": 3,
        "num_position_embeddings": 2304,
        "out_hidden_size": 4096,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "deepstack_visual_indexes": [8, 16, 24],
    },
}


def _tower(config: dict[str, object]) -> int:
    with_tower = parameter_count(model_from_config(config)[0])
    without = parameter_count(model_from_config({k: v for k, v in config.items() if k != "vision_config"})[0])
    return with_tower - without


def _request(config: dict[str, object]) -> EstimateRequest:
    return EstimateRequest(gpu="A100-80GB", vllm_version="0.33.0", max_model_len=32768, config=config)


def test_a_qwen2_5_vl_tower_is_counted_as_qwen2_5_vl_py_builds_it() -> None:
    h, inter, text, merged = 1280, 3420, 3584, 1280 * 2**2
    block = (
        2 * h  # norm1, norm2: RMSNorm
        + h * 3 * h
        + 3 * h  # attn.qkv, biased
        + h * h
        + h  # attn.proj, biased
        + h * 2 * inter
        + 2 * inter  # mlp.gate_up_proj, biased
        + inter * h
        + h  # mlp.down_proj, biased
    )
    patch_embed = 3 * 2 * 14 * 14 * h  # Conv3d(in_chans, h, (temporal, patch, patch)), no bias
    merger = h + merged * merged + merged + merged * text + text  # ln_q, mlp.0, mlp.2
    assert _tower(QWEN25_VL) == 32 * block + patch_embed + merger == 676_550_144


def test_a_qwen2_vl_tower_reads_embed_dim_and_mlp_ratio() -> None:
    h, inter, text, merged = 1280, 4 * 1280, 3584, 1280 * 2**2
    block = (
        2 * 2 * h  # norm1, norm2: LayerNorm with bias
        + (h * 3 * h + 3 * h)  # attn.qkv
        + (h * h + h)  # attn.proj
        + (h * inter + inter)  # mlp.fc1
        + (inter * h + h)  # mlp.fc2
    )
    patch_embed = 3 * 2 * 14 * 14 * h
    merger = 2 * h + merged * merged + merged + merged * text + text  # ln_q is a LayerNorm here
    assert _tower(QWEN2_VL) == 32 * block + patch_embed + merger


def test_a_qwen3_vl_tower_counts_its_position_table_and_deepstack_mergers() -> None:
    h, inter, text, merged = 1152, 4304, 4096, 1152 * 2**2
    block = (
        2 * 2 * h  # norm1, norm2: LayerNorm with bias
        + (h * 3 * h + 3 * h)  # attn.qkv
        + (h * h + h)  # attn.proj
        + (h * inter + inter)  # mlp.linear_fc1
        + (inter * h + h)  # mlp.linear_fc2
    )
    patch_embed = 3 * 2 * 16 * 16 * h + h  # Conv3d with bias
    pos_embed = 2304 * h  # nn.Embedding(num_position_embeddings, h)
    mlp = merged * merged + merged + merged * text + text  # linear_fc1, linear_fc2
    merger = 2 * h + mlp  # norm over the ViT width
    deepstack = 3 * (2 * merged + mlp)  # use_postshuffle_norm: norm over the merged width
    assert _tower(QWEN3_VL) == 27 * block + patch_embed + pos_embed + merger + deepstack == 576_388_336


def test_a_pixtral_tower_behind_mistral3s_projector_is_counted_as_their_modules_build_it() -> None:
    h, inter, text, merged = 1024, 4096, 5120, 1024 * 2**2
    block = (
        2 * h  # attention_norm, ffn_norm: RMSNorm
        + (h * 3 * h + h * h)  # qkv_proj, o_proj, no bias
        + (h * 2 * inter + inter * h)  # gate_up_proj, down_proj, no bias
    )
    tower = 3 * 14 * 14 * h + h + 24 * block  # patch_conv without bias, ln_pre, layers; no positions (RoPE)
    projector = h + merged * h + h * text + text * text  # norm, merging_layer, linear_1, linear_2
    assert _tower(MISTRAL3) == tower + projector
    biased = _tower({**MISTRAL3, "multimodal_projector_bias": True})
    assert biased - _tower(MISTRAL3) == 2 * text


def test_mistral3_images_are_merged_patches() -> None:
    vision = model_from_config(MISTRAL3)[0].vision
    assert vision is not None and vision.patches == (1540 // 14) ** 2
    # mistral3.py splits the features per image by spatial_merge_size²
    assert vision.image_tokens == (1540 // 14) ** 2 // 2**2


def test_a_dynamic_resolution_tower_is_weighed_but_not_profiled(catalog: Catalog) -> None:
    budget = estimate(_request(QWEN25_VL), catalog)
    plain = estimate(_request({k: v for k, v in QWEN25_VL.items() if k != "vision_config"}), catalog)
    assert abs(budget.weights_gib - plain.weights_gib - 676_550_144 * 2 / 2**30) < 0.01
    assert budget.encoder_profile_gib == 0


def test_an_unreadable_or_implausible_tower_is_left_out() -> None:
    vision = dict(QWEN25_VL["vision_config"])  # type: ignore[call-overload]
    broken = [
        {**vision, "depth": 10**9},
        {k: v for k, v in vision.items() if k != "depth"},
        {**vision, "hidden_size": -1},
        {**vision, "patch_size": "14", "spatial_patch_size": None},
    ]
    for tower in broken:
        assert model_from_config({**QWEN25_VL, "vision_config": tower})[0].vision is None
    qwen2 = dict(QWEN2_VL["vision_config"])  # type: ignore[call-overload]
    for ratio in (0, float("nan"), 1e9, "4"):
        assert (
            model_from_config({**QWEN2_VL, "vision_config": {**qwen2, "mlp_ratio": ratio}})[0].vision is None
        )
    # an unknown tower type is SigLIP-shaped, whose learned positions need a fixed image_size
    unknown = {**QWEN25_VL, "model_type": "somevlm", "vision_config": {**vision, "model_type": "somevit"}}
    assert model_from_config(unknown)[0].vision is None
