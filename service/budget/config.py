"""A pasted Hugging Face config.json turned into the catalog's ModelSpec, the way vLLM reads it.

Kept apart from the catalog lookups (`service.budget.resolve`): this is the one place that knows
config.json's field names and the architecture quirks they imply.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from service.budget.hybrid import state_from_config
from service.errors import InvalidConfigError
from service.packs.catalog import MlaSpec, ModelSpec, MoeSpec, QuantSpec, RopeSpec, SlidingSpec, VisionSpec

__all__ = ["model_from_config"]

# Defaults of transformers' config classes for keys that released configs omit (vLLM loads the
# config through these classes, so the defaults are what it sizes): Gemma3TextConfig, whose 27B
# text_config states neither its vocabulary, its context nor its local/global layer pattern.
_CLASS_DEFAULTS: dict[str, dict[str, object]] = {
    "gemma3_text": {
        "vocab_size": 262_208,
        "max_position_embeddings": 131_072,
        "rope_theta": 1_000_000.0,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
}
_QWEN2_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"}
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"}
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


def _int(config: Mapping[str, object], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is None:
        raise InvalidConfigError(f"The config.json has no integer {keys[0]!r}, so the model cannot be sized.")
    return default


def _opt_int(config: Mapping[str, object], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rope(config: Mapping[str, object]) -> RopeSpec:
    # transformers 5 writes `rope_parameters` (theta, type, partial factor, scaling) where older
    # configs have rope_theta / rope_scaling / partial_rotary_factor at the top
    parameters = config.get("rope_parameters")
    if isinstance(parameters, dict):
        config = {**parameters, **config}
        if config.get("rope_scaling") is None and parameters.get("rope_type", "default") != "default":
            config["rope_scaling"] = parameters
    theta = config.get("rope_theta", 10000.0)
    scaling = config.get("rope_scaling")
    kind, factor, original = "default", 1.0, None
    if isinstance(scaling, dict):
        raw_kind = str(scaling.get("rope_type", scaling.get("type", "default")))
        kind = {"su": "longrope", "mrope": "default"}.get(raw_kind, raw_kind)
        factor_value = scaling.get("factor", 1.0)
        factor = float(factor_value) if isinstance(factor_value, int | float) else 1.0
        if not 0 < factor <= _MAX_ROPE_FACTOR:  # also NaN and infinity
            raise InvalidConfigError(
                f"The config.json rope_scaling factor {factor_value} is not a usable scaling "
                f"(at most {_MAX_ROPE_FACTOR:g})."
            )
        original = _opt_int(scaling, "original_max_position_embeddings")
    if kind not in ("default", "linear", "dynamic", "llama3", "yarn", "longrope", "deepseek_yarn"):
        kind = "default"
    partial = config.get("partial_rotary_factor", 1.0)
    try:
        return msgspec.convert(
            {
                "theta": float(theta) if isinstance(theta, int | float) else 10000.0,
                "type": kind,
                "factor": max(factor, 1.0),
                "original_max_position_embeddings": original,
                "partial_rotary_factor": float(partial) if isinstance(partial, int | float) else 1.0,
            },
            RopeSpec,
        )
    except msgspec.ValidationError as exc:
        raise InvalidConfigError(f"The config.json rope settings are not usable ({exc}).") from exc


def _sliding(config: Mapping[str, object], model_type: str) -> SlidingSpec | None:
    window = _opt_int(config, "sliding_window")
    if window is None or config.get("use_sliding_window") is False:
        return None
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
        if not full:
            return SlidingSpec(window=window)
        return SlidingSpec(window=window, global_every=full[0] + 1)
    pattern = _opt_int(config, "sliding_window_pattern")
    if pattern:
        return SlidingSpec(window=window, global_every=pattern)
    return SlidingSpec(window=window, global_every=2 if model_type == "gemma2" else 0)


def _moe(config: Mapping[str, object]) -> MoeSpec | None:
    experts = _opt_int(config, "num_local_experts") or _opt_int(config, "num_experts")
    experts = experts or _opt_int(config, "n_routed_experts")
    if not experts or experts < 2:
        return None
    return MoeSpec(
        num_experts=experts,
        experts_per_token=_int(config, "num_experts_per_tok", "num_experts_per_token", "moe_topk", default=2),
        intermediate_size=_int(config, "moe_intermediate_size", "intermediate_size"),
        shared_experts=_int(config, "n_shared_experts", "num_shared_experts", default=0),
        shared_intermediate_size=_opt_int(config, "shared_expert_intermediate_size") or None,
        shared_expert_gate=bool(_opt_int(config, "shared_expert_intermediate_size")),
        first_dense_layers=_int(config, "first_k_dense_replace", default=0),
        layer_step=_int(config, "decoder_sparse_step", "moe_layer_freq", default=1),
        score_correction_bias=config.get("topk_method") == "noaux_tc",
    )


def _mla(config: Mapping[str, object]) -> MlaSpec | None:
    rank = _opt_int(config, "kv_lora_rank")
    if not rank:
        return None
    return MlaSpec(
        kv_lora_rank=rank,
        q_lora_rank=_opt_int(config, "q_lora_rank"),
        qk_rope_head_dim=_int(config, "qk_rope_head_dim"),
        qk_nope_head_dim=_int(config, "qk_nope_head_dim"),
        v_head_dim=_int(config, "v_head_dim"),
    )


def _weight_schemes(q: Mapping[str, object]) -> list[Mapping[str, object]]:
    """The `weights` schemes of a compressed-tensors config's groups."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict):
        return []
    schemes = [g.get("weights") for g in groups.values() if isinstance(g, dict)]
    return [w for w in schemes if isinstance(w, dict)]


def _compressed_tensors(q: Mapping[str, object]) -> str:
    """The catalog method of a compressed-tensors checkpoint, from its widest weight scheme."""
    schemes = _weight_schemes(q)
    if not schemes:
        raise InvalidConfigError("The config.json compressed-tensors quantization names no weight scheme.")
    scheme = max(schemes, key=lambda w: _opt_int(w, "num_bits") or 0)
    bits, kind = scheme.get("num_bits"), scheme.get("type", "int")
    if bits == 4 and kind == "float":
        return "nvfp4"
    if bits == 4:
        return "w4a16"
    if bits == 8 and kind == "float":
        return "fp8-block" if scheme.get("strategy") == "block" or scheme.get("block_structure") else "fp8"
    if bits == 8:
        return "int8-w8a8"
    raise InvalidConfigError(
        f"The config.json compressed-tensors scheme of {bits} bits is not in the catalog."
    )


def _gptq_like(method: str, bits: object) -> str:
    if bits == 4:
        return "awq" if method == "awq" else "gptq"
    if bits == 8:
        return "gptq-int8"
    raise InvalidConfigError(f"The config.json {method} quantization with {bits} bits is not in the catalog.")


def _kv_scheme(q: Mapping[str, object]) -> str | None:
    """The KV-cache dtype a checkpoint declares, which vLLM uses for `--kv-cache-dtype auto`.

    modelopt's `kv_cache_quant_algo` (or a `kv_cache_scheme` of fp8/fp4 floats), as
    `get_kv_cache_quant_algo_string` reads it in 0.33.0.
    """
    inner = q.get("quantization", q)
    inner = inner if isinstance(inner, dict) else q
    algo = inner.get("kv_cache_scheme") or q.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
    algo = algo or q.get("kv_cache_quant_algo")
    if isinstance(algo, dict):
        if algo.get("type") == "float" and algo.get("num_bits") == 8:
            return "fp8"
        return "nvfp4" if algo.get("type") == "float" and algo.get("num_bits") == 4 else None
    if isinstance(algo, str) and algo.lower() in ("fp8", "nvfp4"):
        return algo.lower()
    return None


def _quant(config: Mapping[str, object]) -> QuantSpec | None:
    """The checkpoint's quantization as a catalog method (scales and zero points are in its bytes)."""
    q = config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method", "")).lower().replace("_", "-")
    bits = q.get("bits", 4)
    kv = _kv_scheme(q) if method.startswith("modelopt") else None
    if method in ("fp8", "fbgemm-fp8"):
        return QuantSpec(method="fp8-block" if q.get("weight_block_size") else "fp8")
    if method in ("awq", "gptq", "auto-round", "autoround", "intel/auto-round"):
        return QuantSpec(method=_gptq_like("awq" if method == "awq" else "gptq", bits))
    if method == "mxfp4":
        return QuantSpec(method="mxfp4", scope="experts")
    if method.startswith("modelopt"):
        inner = q.get("quantization", q)
        algo = str((inner if isinstance(inner, dict) else q).get("quant_algo", "FP8")).upper()
        return QuantSpec(method="nvfp4" if "FP4" in algo else "fp8", kv_cache_dtype=kv)
    if method == "bitsandbytes":
        return QuantSpec(method="bitsandbytes-int8" if q.get("load_in_8bit") else "bitsandbytes-nf4")
    if method == "compressed-tensors":
        return QuantSpec(method=_compressed_tensors(q), kv_cache_dtype=_kv_scheme(q))
    raise InvalidConfigError(f"The config.json quantization method {method!r} is not in the catalog.")


# Far beyond any served model (the largest have ~128 layers, hidden 16k, vocab 262k): a pasted
# config above these bounds is a typo or an attack, and sizing it would loop per layer for hours.
_CONFIG_LIMITS = {
    "num_hidden_layers": 4096,
    "hidden_size": 1 << 20,
    "intermediate_size": 1 << 22,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 30,
}


_MAX_ROPE_FACTOR = 1024.0


def _check_limits(fields: Mapping[str, object]) -> None:
    for key, limit in _CONFIG_LIMITS.items():
        value = fields[key]
        if isinstance(value, int) and value > limit:
            raise InvalidConfigError(
                f"The config.json {key} {value} is implausibly large (at most {limit:,}), "
                "so it cannot be sized."
            )


def _sections(config: Mapping[str, object], model_type: str) -> dict[str, object]:
    """The sliding-window, MoE and MLA parts; a value their checks refuse is the config's error."""
    try:
        return {"sliding": _sliding(config, model_type), "moe": _moe(config), "mla": _mla(config)}
    except ValueError as exc:
        raise InvalidConfigError(f"The config.json does not describe a usable model ({exc}).") from exc


# vision_config field names per tower field, first found wins (vLLM's tower classes read these):
# Qwen2-VL names its ViT width embed_dim, its hidden_size being the merger's output
_VISION_FIELDS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "depth"),
    "hidden_size": ("embed_dim", "hidden_size"),
    "intermediate_size": ("intermediate_size",),
    "patch_size": ("patch_size", "spatial_patch_size"),
    "image_size": ("image_size",),
    "channels": ("num_channels", "in_chans", "in_channels"),
    "temporal_patch_size": ("temporal_patch_size",),
    "spatial_merge_size": ("spatial_merge_size",),
    "position_count": ("num_position_embeddings",),
}
_VISION_LIMITS = {"layers": 1024, "hidden_size": 1 << 16, "intermediate_size": 1 << 18}
# Layer shapes by vision model_type (the outer model_type when the vision_config names none), from
# vLLM's tower classes; a type not listed is taken as SigLIP/CLIP-shaped (VisionSpec's defaults)
_RMS_GATED = {"mlp": "gated", "norm": "rms", "patch_bias": False, "position_embeddings": False}
_QWEN3_VL: dict[str, object] = {"post_norm": False, "projector": "merger"}
_TOWER_SHAPES: dict[str, dict[str, object]] = {
    # qwen2_vl.py Qwen2VisionTransformer: LayerNorm, fc1/fc2, Conv3d without bias, PatchMerger
    "qwen2_vl": {
        "patch_bias": False,
        "position_embeddings": False,
        "post_norm": False,
        "projector": "merger",
    },
    # qwen2_5_vl.py Qwen2_5_VisionTransformer: RMSNorm, SiLU-gated MLP with biases, PatchMerger
    "qwen2_5_vl": {**_RMS_GATED, "post_norm": False, "projector": "merger"},
    # qwen3_vl.py Qwen3_VisionTransformer (also Qwen3.5's): Conv3d with bias, learned positions
    # interpolated per image, LayerNorm, fc1/fc2, a merger plus one per deepstack layer
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"), _QWEN3_VL),
    # pixtral.py PixtralHFVisionModel: no biases, RMSNorm, gated MLP, ln_pre, 2D RoPE
    "pixtral": {**_RMS_GATED, "bias": False, "pre_norm": True, "post_norm": False},
}
# Projectors by the outer model_type: mistral3.py Mistral3MultiModalProjector
_PROJECTORS: dict[str, dict[str, object]] = {"mistral3": {"projector": "patch-merger"}}


def _vision_int(config: Mapping[str, object], names: tuple[str, ...]) -> int | None:
    value = next((v for v in (_opt_int(config, n) for n in names) if v is not None), None)
    return value if value is not None and value > 0 else None


def _vision_tower(outer: Mapping[str, object]) -> dict[str, object] | None:
    """The `vision_config` tower as VisionSpec fields, or None when its shape cannot be read.

    Towers of dynamic resolution (no image_size) size their images in the processor, which a config
    alone does not state, so their weights are counted but their profiling reserve is not estimated.
    """
    vision = outer.get("vision_config")
    if not isinstance(vision, dict):
        return None
    kind = str(vision.get("model_type") or outer.get("model_type", ""))
    tower: dict[str, object] = {
        **_TOWER_SHAPES.get(kind, {}),
        **_PROJECTORS.get(str(outer.get("model_type")), {}),
    }
    for field, names in _VISION_FIELDS.items():
        value = _vision_int(vision, names) or _vision_int(
            outer, names if field == "spatial_merge_size" else ()
        )
        if value is not None:
            tower[field] = value
    ratio = vision.get("mlp_ratio")
    width = tower.get("hidden_size")
    # qwen2_vl.py: int(dim * mlp_ratio); a ratio beyond any tower leaves the MLP width unknown
    usable = isinstance(ratio, int | float) and 0 < ratio <= 64
    if (
        "intermediate_size" not in tower
        and usable
        and isinstance(ratio, int | float)
        and isinstance(width, int)
    ):
        tower["intermediate_size"] = int(width * ratio)
    deepstack = vision.get("deepstack_visual_indexes")
    if isinstance(deepstack, list):
        tower["deepstack_mergers"] = len(deepstack)
    if outer.get("multimodal_projector_bias") is True:
        tower["projector_bias"] = True
    tokens = _opt_int(outer, "mm_tokens_per_image")
    if tokens is not None and tokens > 0:
        tower["tokens_per_image"] = tokens
    for field, limit in _VISION_LIMITS.items():
        size = tower.get(field)
        if not isinstance(size, int) or size > limit:
            return None  # a field missing, or beyond any tower: not sized, as a text-only model
    try:
        spec: dict[str, object] = msgspec.to_builtins(msgspec.convert(tower, VisionSpec))
    except msgspec.ValidationError:
        return None
    return spec


def model_from_config(
    config: Mapping[str, object], name: str | None = None
) -> tuple[ModelSpec, QuantSpec | None]:
    """A ModelSpec from a Hugging Face config.json (the text part of a multimodal config)."""
    outer = config
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**text, **{k: v for k, v in config.items() if k == "quantization_config"}}
    model_type = str(config.get("model_type", outer.get("model_type", "unknown")))
    # keys a released config.json leaves to its transformers config class's defaults
    config = {**_CLASS_DEFAULTS.get(model_type, {}), **config}
    heads = _int(config, "num_attention_heads", "n_head")
    hidden = _int(config, "hidden_size", "d_model", "n_embd")
    archs = outer.get("architectures")
    label = name or (str(archs[0]) if isinstance(archs, list) and archs else model_type)
    dtype = str(config.get("torch_dtype", config.get("dtype", outer.get("torch_dtype", "bfloat16"))))
    is_opt = model_type == "opt"
    max_len = _int(
        config, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", default=2048
    )
    attention_bias: str = "none"
    if model_type in _QWEN2_BIAS:
        attention_bias = "qkv"
    if config.get("attention_bias") is True or is_opt or model_type == "gpt_oss":
        attention_bias = "qkvo"
    fields: dict[str, object] = {
        "id": label,
        "hf_id": name if name and "/" in name else f"config/{label}",
        "family": model_type,
        "num_hidden_layers": _int(config, "num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": _int(config, "num_key_value_heads", "num_kv_heads", default=heads),
        "head_dim": _opt_int(config, "head_dim"),
        "intermediate_size": _int(config, "intermediate_size", "ffn_dim", "n_inner", default=4 * hidden),
        "vocab_size": _int(config, "vocab_size"),
        "max_position_embeddings": max_len,
        "torch_dtype": dtype if dtype in ("bfloat16", "float16", "float32") else "bfloat16",
        "tie_word_embeddings": bool(
            config.get("tie_word_embeddings", outer.get("tie_word_embeddings", False))
        ),
        "attention_bias": attention_bias,
        "mlp": "plain" if is_opt else "gated",
        "mlp_bias": is_opt or bool(config.get("mlp_bias", False)),
        "norm": "layer" if is_opt else "rms",
        "norms_per_layer": 4 if model_type in _FOUR_NORMS else 2,
        "qk_norm": model_type in _QK_NORM,
        "learned_positions": max_len + 2 if is_opt else 0,
        "attention_sinks": model_type == "gpt_oss",
        "rope": None if is_opt else _rope(config),
        "mtp_layers": _int(config, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0),
        "state": state_from_config(
            config, model_type, _int(config, "num_hidden_layers", "n_layer", "num_layers")
        ),
        "vision": _vision_tower(outer),
        **_sections(config, model_type),
    }
    _check_limits(fields)
    try:
        spec = msgspec.convert(fields, ModelSpec)
    except msgspec.ValidationError as exc:
        raise InvalidConfigError(f"The config.json does not describe a usable model ({exc}).") from exc
    return spec, _quant(config)
