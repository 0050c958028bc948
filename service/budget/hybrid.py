"""Hybrid models: which layers keep a KV cache and what per-request state the others keep.

Read from config.json as vLLM's model classes read it (0.33.0 sources):
- Gated DeltaNet (Qwen3-Next `qwen3_next.py`, Qwen3.5/3.6 `qwen3_5.py`): `layer_types` or
  `full_attention_interval`; conv state (2·k_heads·k_dim + v_heads·v_dim) × (kernel − 1 + the
  speculative tokens), recurrent (v_heads, v_dim, k_dim)
  (`MambaStateShapeCalculator.gated_delta_net_state_shape`, `num_spec`) in the model dtype, or in
  the config's `mamba_ssm_dtype` (Qwen3.5's `Qwen3_5ForConditionalGenerationConfig` makes it the
  `mamba_ssm_cache_dtype`; its releases say float32).
- Kimi Delta Attention (Kimi-Linear, `kimi_gdn_linear_attn.py`): `linear_attn_config` with 1-based
  `kda_layers` / `full_attn_layers`; conv 3·heads·head_dim × (kernel − 1), recurrent (heads, d, d) in
  float32 (`kda_state_dtype`).
- Mamba2 (Nemotron-H, `nemotron_h.py`): `hybrid_override_pattern` (`*` attention, `M` Mamba, `-`/`E`
  MLP or MoE only); conv (heads·head_dim + 2·groups·state) × (kernel − 1), recurrent
  (heads, head_dim, state) in float32 (`NemotronHForCausalLMConfig`'s default ssm cache dtype).
"""

from __future__ import annotations

from collections.abc import Mapping

from service.budget.kv import cdiv
from service.packs.catalog import ModelSpec, StateSpec

__all__ = ["hybrid_block_size", "state_bytes", "state_from_config"]

# The smallest kernel block of the attention backends (FlashAttention/FlashInfer: multiples of 16);
# vLLM raises an MLA model's block to a multiple of 128 for the TRT-LLM/FlashInfer MLA kernels.
_KERNEL_BLOCK = 16
_MLA_KERNEL_BLOCK = 128
_FLOAT32 = ("float32", "fp32")


def _int(config: Mapping[str, object], key: str, default: int = 0) -> int:
    value = config.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _gdn(config: Mapping[str, object], layers: int) -> StateSpec | None:
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        attention = [i for i, kind in enumerate(kinds) if kind == "full_attention"]
        linear = [i for i, kind in enumerate(kinds) if kind == "linear_attention"]
    else:
        interval = _int(config, "full_attention_interval", 4) or 4
        attention = [i for i in range(layers) if (i + 1) % interval == 0]
        linear = [i for i in range(layers) if (i + 1) % interval]
    k_heads, v_heads = _int(config, "linear_num_key_heads"), _int(config, "linear_num_value_heads")
    k_dim, v_dim = _int(config, "linear_key_head_dim"), _int(config, "linear_value_head_dim")
    if not (linear and k_heads and v_heads and k_dim and v_dim):
        return None
    return StateSpec(
        kind="gdn",
        attention_layers=attention,
        state_layers=linear,
        conv_dim=2 * k_heads * k_dim + v_heads * v_dim,
        conv_width=_int(config, "linear_conv_kernel_dim", 4) - 1,
        heads=v_heads,
        head_elements=v_dim * k_dim,
        float32_state=config.get("mamba_ssm_dtype") in _FLOAT32,
    )


def _kda(config: Mapping[str, object], layers: int) -> StateSpec | None:
    linear = config.get("linear_attn_config")
    if not isinstance(linear, dict):
        return None
    kda, full = linear.get("kda_layers"), linear.get("full_attn_layers")
    heads, dim = _int(linear, "num_heads"), _int(linear, "head_dim")
    if not (isinstance(kda, list) and isinstance(full, list) and kda and heads and dim):
        return None
    return StateSpec(
        kind="kda",
        attention_layers=[int(i) - 1 for i in full if isinstance(i, int) and 0 < i <= layers],
        state_layers=[int(i) - 1 for i in kda if isinstance(i, int) and 0 < i <= layers],
        conv_dim=3 * heads * dim,
        conv_width=_int(linear, "short_conv_kernel_size", 4) - 1,
        heads=heads,
        head_elements=dim * dim,
        float32_state=True,
    )


def _mamba2(config: Mapping[str, object], layers: int) -> StateSpec | None:
    pattern = config.get("hybrid_override_pattern")
    heads, head_dim = _int(config, "mamba_num_heads"), _int(config, "mamba_head_dim")
    state = _int(config, "ssm_state_size")
    if not (isinstance(pattern, str) and len(pattern) == layers and heads and head_dim and state):
        return None
    ssm_dtype = config.get("mamba_ssm_cache_dtype", "float32")
    return StateSpec(
        kind="mamba2",
        attention_layers=[i for i, c in enumerate(pattern) if c == "*"],
        state_layers=[i for i, c in enumerate(pattern) if c == "M"],
        conv_dim=heads * head_dim,
        conv_width=_int(config, "conv_kernel", 4) - 1,
        heads=heads,
        head_elements=head_dim * state,
        float32_state=ssm_dtype in _FLOAT32,
        groups=_int(config, "n_groups", 1),
        group_channels=2 * state,
    )


def state_from_config(config: Mapping[str, object], model_type: str, layers: int) -> StateSpec | None:
    """The hybrid layout of a config.json, or None for a model whose every layer keeps a KV cache."""
    if "linear_attn_config" in config:
        return _kda(config, layers)
    if "hybrid_override_pattern" in config:
        return _mamba2(config, layers)
    if "linear_num_value_heads" in config or model_type.startswith("qwen3_next"):
        return _gdn(config, layers)
    return None


def state_bytes(state: StateSpec, tp: int, dtype_bytes: float, speculative_tokens: int = 0) -> int:
    """Bytes of one state layer's per-request state on one GPU (vLLM's MambaSpec page, unpadded).

    Under speculative decoding the conv state also keeps the drafted tokens: every state shape
    calculator (Gated DeltaNet, KDA, Mamba2) widens it by `num_spec` = num_speculative_tokens.
    """
    groups = state.groups
    if groups and groups % tp:
        groups += tp - groups  # vLLM's extra_groups_for_head_shards, for groups that do not divide
    width = state.conv_width + speculative_tokens
    conv = (state.conv_dim + groups * state.group_channels) // tp * width * dtype_bytes
    recurrent = state.heads // tp * state.head_elements * (4 if state.float32_state else dtype_bytes)
    return int(conv + recurrent)


def hybrid_block_size(model: ModelSpec, block_size: int, attention_page_token: int, state_page: int) -> int:
    """The block size vLLM raises a hybrid model to, so one attention page holds one state page.

    `Platform._align_hybrid_block_size`: the smallest multiple of the kernel block whose attention
    page is at least the state page; a larger configured block stays.
    """
    align = max(_MLA_KERNEL_BLOCK if model.mla is not None else _KERNEL_BLOCK, block_size)
    raised = align * cdiv(state_page, align * attention_page_token)
    raised = _KERNEL_BLOCK * cdiv(raised, _KERNEL_BLOCK)
    return max(block_size, raised)
