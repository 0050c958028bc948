"""Parameter counts and weight bytes per GPU, computed from the architecture as vLLM shards it.

Tensor parallelism splits attention heads, MLP/expert columns and the (padded) vocabulary; norms,
routers and MLA's down-projections are replicated; KV projections are replicated when TP exceeds the
KV heads. Pipeline parallelism gives each stage a slice of layers (vLLM's `get_pp_indices`), the
embedding to the first stage and the LM head to the last. Quantized linear layers use the method's
bytes per weight; embeddings, heads, norms, biases and routers stay in the model dtype. The rotary
cos/sin cache is a buffer vLLM allocates while loading, so "Model loading took" includes it.
"""

from __future__ import annotations

import math

import msgspec

from service.packs.catalog import ModelSpec, VisionSpec
from service.packs.derived import ByIdentity

__all__ = [
    "Sharding",
    "WeightBytes",
    "draft_layer_bytes",
    "with_draft",
    "local_experts",
    "parameter_count",
    "pp_layer_counts",
    "rope_cache_elements",
    "stage_weight_bytes",
]


class Sharding(msgspec.Struct, frozen=True):
    """How one GPU sees the model: TP degree, the vocabulary padding and the quantization scope.

    MoE experts follow vLLM's FusedMoEParallelConfig: with data parallelism their matrices are
    sliced over TP × DP (`expert_tp`); with expert parallelism each GPU of the TP × DP group holds
    whole experts instead (`expert_parallel` GPUs share them, the first ones one more when they do
    not divide, as `determine_expert_map` places them).
    """

    tp: int = 1
    vocab_padding: int = 0
    quant_scope: str | None = None
    unquantized_layers: tuple[int, int] = (0, 0)
    expert_tp: int | None = None
    expert_parallel: int = 1

    @property
    def moe_tp(self) -> int:
        return self.expert_tp if self.expert_tp is not None else self.tp


class Split(msgspec.Struct, frozen=True):
    """Elements on one GPU: quantizable linear weights (attention, MLP, experts) and the rest."""

    linear: int = 0
    experts: int = 0
    dense: int = 0
    mlp: int = 0

    def __add__(self, other: Split) -> Split:
        return Split(
            self.linear + other.linear,
            self.experts + other.experts,
            self.dense + other.dense,
            self.mlp + other.mlp,
        )

    def times(self, n: int) -> Split:
        return Split(self.linear * n, self.experts * n, self.dense * n, self.mlp * n)

    def unquantized(self) -> Split:
        """The same elements with nothing quantizable: a layer the checkpoint leaves in its dtype."""
        return Split(dense=self.total)

    @property
    def total(self) -> int:
        return self.linear + self.experts + self.dense + self.mlp

    def quantizable(self, scope: str | None) -> int:
        """Elements the checkpoint's quantization covers: all linear layers, MLPs only, or experts only."""
        if scope == "linear":
            return self.linear + self.mlp + self.experts
        if scope == "mlp":
            return self.mlp + self.experts
        if scope == "experts":
            return self.experts
        return 0


class WeightBytes(msgspec.Struct, frozen=True):
    """Weight bytes on the fullest GPU, and how they split."""

    total: int
    quantized: int
    unquantized: int
    rope_cache: int
    # speculative decoding's drafter (MTP layers or a draft model), inside `total`
    draft: int = 0


def _norm(model: ModelSpec) -> int:
    return model.hidden_size * (2 if model.norm == "layer" else 1)


def _attention(model: ModelSpec, tp: int) -> Split:
    h = model.hidden_size
    heads = model.num_attention_heads // tp
    if model.mla is not None:
        mla = model.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        replicated = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        norms = mla.kv_lora_rank
        if mla.q_lora_rank is not None:
            replicated += h * mla.q_lora_rank
            sharded_q = mla.q_lora_rank * heads * qk
            norms += mla.q_lora_rank
        else:
            sharded_q = h * heads * qk
        kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        out = heads * mla.v_head_dim * h
        return Split(linear=replicated + sharded_q + kv_b + out, dense=norms)
    hd = model.kv_head_dim
    kv = max(1, model.num_key_value_heads // tp)
    weights = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    dense = 0
    if model.attention_bias in ("qkv", "qkvo"):
        dense += heads * hd + 2 * kv * hd
    if model.attention_bias == "qkvo":
        dense += h
    if model.qk_norm:
        dense += 2 * hd
    if model.attention_sinks:
        dense += heads
    return Split(linear=weights, dense=dense)


def _dense_mlp(model: ModelSpec, intermediate: int, tp: int) -> Split:
    h = model.hidden_size
    inter = intermediate // tp
    if model.mlp == "gated":
        return Split(mlp=3 * h * inter, dense=(2 * inter + h) if model.mlp_bias else 0)
    return Split(mlp=2 * h * inter, dense=(inter + h) if model.mlp_bias else 0)


def local_experts(num_experts: int, expert_parallel: int) -> int:
    """Experts on the fullest GPU of an EP group (the first `num_experts % ep` GPUs hold one more)."""
    return math.ceil(num_experts / expert_parallel)


def _moe_mlp(model: ModelSpec, sharding: Sharding) -> Split:
    moe = model.moe
    assert moe is not None
    h, tp = model.hidden_size, sharding.tp
    inter = moe.intermediate_size // sharding.moe_tp
    local = local_experts(moe.num_experts, sharding.expert_parallel)
    experts = local * 3 * h * inter
    # the router scores every expert, so it stays whole on each GPU
    dense = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
    if moe.expert_bias:
        dense += local * (2 * inter + h)
    if moe.score_correction_bias:
        dense += moe.num_experts
    shared = moe.shared_intermediate_size or moe.shared_experts * moe.intermediate_size
    mlp = 3 * h * (shared // tp) if shared else 0
    if moe.shared_expert_gate:
        dense += h
    return Split(mlp=mlp, experts=experts, dense=dense)


def _is_moe_layer(model: ModelSpec, index: int) -> bool:
    moe = model.moe
    return moe is not None and index >= moe.first_dense_layers and (index + 1) % moe.layer_step == 0


def _vision(model: ModelSpec, tp: int) -> int:
    """The vision tower's and projector's parameters on one GPU (vLLM shards their linears by TP)."""
    v = model.vision
    if v is None:
        return 0
    h, inter, text = v.hidden_size, v.intermediate_size, model.hidden_size
    norm = 2 * h if v.norm == "layer" else h
    attention = (4 * h * h) // tp + (4 * h if v.bias else 0)
    if v.mlp == "gated":
        mlp = (3 * h * inter) // tp + (2 * inter + h if v.bias else 0)
    else:
        mlp = (2 * h * inter) // tp + (inter + h if v.bias else 0)
    per_layer = attention + mlp + 2 * norm
    embeddings = v.channels * v.temporal_patch_size * v.patch_size**2 * h + (h if v.patch_bias else 0)
    positions = (v.position_count or v.patches) if v.position_embeddings else 0
    embeddings += positions * h + (norm if v.pre_norm else 0)
    return v.layers * per_layer + embeddings + (norm if v.post_norm else 0) + _projector(v, text, tp)


def _projector(v: VisionSpec, text: int, tp: int) -> int:
    h = v.hidden_size
    merged = h * v.spatial_merge_size**2
    if v.projector == "merger":  # ln_q, then Linear(merged, merged) and Linear(merged, text), biased
        width = 2 if v.norm == "layer" else 1
        mlp = (merged * merged + merged * text) // tp + merged + text
        return width * h + mlp + v.deepstack_mergers * (width * merged + mlp)
    if v.projector == "patch-merger":  # RMSNorm, merging_layer (replicated), linear_1, linear_2
        bias = 2 * text if v.projector_bias else 0
        return h + merged * h + (h * text + text * text) // tp + bias
    return h * text + h  # the input norm and one projection matrix


def _vocab(model: ModelSpec, sharding: Sharding) -> int:
    vocab = model.vocab_size
    if sharding.vocab_padding:
        vocab = math.ceil(vocab / sharding.vocab_padding) * sharding.vocab_padding
    return math.ceil(vocab / sharding.tp)


def pp_layer_counts(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vLLM assigns them: the remainder goes to the stages before the last."""
    counts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        counts[-i] += 1
    return counts


def _layer_counts(
    model: ModelSpec, sharding: Sharding, start: int, stop: int
) -> dict[tuple[bool, bool], int]:
    """Layers of [start, stop) by (MoE layer, left unquantized by the checkpoint)."""
    first, last = sharding.unquantized_layers
    counts: dict[tuple[bool, bool], int] = {}
    for index in range(start, stop):
        kept = index < first or index >= model.num_hidden_layers - last
        key = (_is_moe_layer(model, index), kept)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _stage(model: ModelSpec, sharding: Sharding, start: int, stop: int, first: bool, last: bool) -> Split:
    common = _attention(model, sharding.tp) + Split(dense=model.norms_per_layer * _norm(model))
    total = Split()
    for (moe, kept), n in _layer_counts(model, sharding, start, stop).items():
        mlp = _moe_mlp(model, sharding) if moe else _dense_mlp(model, model.intermediate_size, sharding.tp)
        layer = common + mlp
        total = total + (layer.unquantized() if kept else layer).times(n)
    vocab = _vocab(model, sharding) * model.hidden_size
    if first:
        total = total + Split(dense=vocab + model.learned_positions * model.hidden_size)
        total = total + Split(dense=_vision(model, sharding.tp))
    if last:
        head = vocab if (not model.tie_word_embeddings or not first) else 0
        total = total + Split(dense=head + _norm(model))
    return total


def parameter_count(model: ModelSpec) -> int:
    """Parameters of the served model (as loaded by vLLM, unpadded, one copy of tied embeddings)."""
    return _stage(model, Sharding(), 0, model.num_hidden_layers, True, True).total


def rope_cache_elements(model: ModelSpec) -> int:
    """Elements of the rotary cos/sin cache(s) vLLM registers as buffers (rows × rotary dim)."""
    rope = model.rope
    if rope is None:
        return 0
    dim = model.mla.qk_rope_head_dim if model.mla is not None else model.kv_head_dim
    dim = int(dim * rope.partial_rotary_factor)
    rows = model.max_position_embeddings
    if rope.type in ("linear", "dynamic"):
        rows = int(rows * rope.factor)
    elif rope.type in ("yarn", "deepseek_yarn"):
        rows = int((rope.original_max_position_embeddings or rows) * rope.factor)
    elif rope.type == "longrope":
        rows += rope.original_max_position_embeddings or 0
    if rope.local_theta is not None:
        rows += model.max_position_embeddings
    return rows * dim


def _weight_bytes(
    split: Split, sharding: Sharding, rope: int, dtype_bytes: float, quant_bytes: float | None
) -> WeightBytes:
    quantizable = split.quantizable(sharding.quant_scope) if quant_bytes is not None else 0
    q = int(quantizable * (quant_bytes or 0.0))
    u = int((split.total - quantizable) * dtype_bytes)
    return WeightBytes(total=q + u + rope, quantized=q, unquantized=u, rope_cache=rope)


def draft_layer_bytes(
    model: ModelSpec, sharding: Sharding, dtype_bytes: float, quant_bytes: float | None
) -> int:
    """Bytes on one GPU of the MTP draft layers a checkpoint ships, which vLLM loads only to speculate.

    Each is one more decoder layer (the last layer's kind, sharded like it) plus its replicated
    2h → h projection (`eh_proj`, an nn.Linear) and two norms; embedding and head are the target's.
    """
    if model.mtp_layers == 0:
        return 0
    # the last decoder layer but one: of the last layers' kind, and never one a checkpoint keeps
    # unquantized at the very end
    like = max(0, model.num_hidden_layers - 2)
    split = _stage(model, sharding, like, like + 1, False, False)
    layer = _weight_bytes(split, sharding, 0, dtype_bytes, quant_bytes)
    projection = int((2 * model.hidden_size * model.hidden_size + 2 * model.hidden_size) * dtype_bytes)
    return model.mtp_layers * (layer.total + projection)


def with_draft(weights: WeightBytes, draft: int) -> WeightBytes:
    """A GPU's weights with a drafter's bytes added (counted unquantized: the spread is the target's)."""
    return WeightBytes(
        total=weights.total + draft,
        quantized=weights.quantized,
        unquantized=weights.unquantized + draft,
        rope_cache=weights.rope_cache,
        draft=draft,
    )


def stage_weight_bytes(
    model: ModelSpec, sharding: Sharding, pp: int, dtype_bytes: float, quant_bytes: float | None
) -> list[WeightBytes]:
    """Weight bytes of one GPU in each pipeline stage (the figure vLLM logs per worker)."""
    params = (sharding, pp, dtype_bytes, quant_bytes)
    known = _STAGE_WEIGHTS.get((model,), params)
    if known is None:
        known = tuple(_stage_weight_bytes(model, sharding, pp, dtype_bytes, quant_bytes))
        _STAGE_WEIGHTS.put((model,), params, known)
    return list(known)


# a catalog model's weights per sharding: every budget and each TP size a search tries asks again
_STAGE_WEIGHTS: ByIdentity[tuple[WeightBytes, ...]] = ByIdentity(4096)


def _stage_weight_bytes(
    model: ModelSpec, sharding: Sharding, pp: int, dtype_bytes: float, quant_bytes: float | None
) -> list[WeightBytes]:
    rope = int(rope_cache_elements(model) * dtype_bytes)
    stages: list[WeightBytes] = []
    start = 0
    counts = pp_layer_counts(model.num_hidden_layers, pp)
    for stage, n in enumerate(counts):
        split = _stage(model, sharding, start, start + n, stage == 0, stage == len(counts) - 1)
        start += n
        stages.append(_weight_bytes(split, sharding, rope, dtype_bytes, quant_bytes))
    return stages
