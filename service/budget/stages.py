"""Per-GPU arithmetic of one pipeline stage: weights, KV layout, overheads, what vLLM requests.

Each function reads a resolved Run and the catalog's engine facts; nothing here writes prose.
"""

from __future__ import annotations

import math

import msgspec

from service.budget import startup
from service.budget.checkpoint import checkpoint_scale, scale_weights
from service.budget.gguf import file_type_counts, gguf_bytes, type_counts
from service.budget.hybrid import hybrid_block_size, state_bytes
from service.budget.inputs import GIB, Run
from service.budget.kv import KvLayout, group_layout
from service.budget.multimodal import encoder_profile_bytes
from service.budget.overheads import activation_bytes, component_bytes, overhead_era, overhead_terms
from service.budget.speculative import Drafter
from service.budget.startup import max_passing_utilization
from service.budget.weights import (
    Sharding,
    WeightBytes,
    draft_layer_bytes,
    parameter_count,
    pp_layer_counts,
    stage_weight_bytes,
    with_draft,
)
from service.packs.catalog import Catalog, GgufFileType, ModelSpec, OverheadEra
from service.schemas import StartupCheck

__all__ = [
    "Stage",
    "holds_one_request",
    "kv_budget_bytes",
    "logged_pool",
    "null_block_bytes",
    "requested_bytes",
    "stage_budgets",
    "startup_check",
    "to_gib",
    "with_checkpoint",
    "with_file_weights",
]


class Stage(msgspec.Struct, frozen=True):
    """One pipeline stage's GPU: its weights, KV layout and overheads."""

    weights: WeightBytes
    layout: KvLayout
    non_torch: int
    activation: int
    cuda_graph: int
    graph_in_budget: bool
    # the fitted overhead era the figures come from, with their spreads
    era: OverheadEra
    # the multimodal encoder's profiling above the decoder's activation peak (multimodal.py)
    encoder_profile: int = 0

    @property
    def fixed(self) -> int:
        """Everything vLLM subtracts from `requested` before the KV cache."""
        graphs = self.cuda_graph if self.graph_in_budget else 0
        return self.weights.total + self.non_torch + self.activation + graphs + self.encoder_profile


def _layer_kinds(run: Run, start: int, stop: int, hybrid: bool) -> tuple[int, int]:
    """(full, sliding) attention layers in [start, stop) as vLLM's KV manager treats them.

    Before the hybrid KV-cache manager, a model mixing sliding and global layers was planned as if
    every layer were global.
    """
    if run.model.state is not None:
        return sum(1 for i in run.model.state.attention_layers if start <= i < stop), 0
    sliding = run.model.sliding
    if sliding is None:
        return stop - start, 0
    if sliding.global_every == 0:
        return 0, stop - start
    if not hybrid:
        return stop - start, 0
    n_global = sum(1 for i in range(start, stop) if (i + 1) % sliding.global_every == 0)
    return n_global, stop - start - n_global


def _kv_bytes_per_token_layer(run: Run, tp: int, model: ModelSpec | None = None) -> int:
    """KV bytes per token of one attention layer of `model` (the run's own by default) on one GPU."""
    model = model or run.model
    kv = run.kv
    element = kv.bytes if kv.bytes is not None else run.dtype_bytes
    if model.mla is not None:
        if kv.mla_bytes_per_token is not None:
            return kv.mla_bytes_per_token
        return int((model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * element)
    heads = max(1, model.num_key_value_heads // tp)
    return int(2 * heads * model.kv_head_dim * element + 2 * heads * kv.scale_bytes_per_head)


def _state_blocks(run: Run, catalog: Catalog) -> int:
    """State pages a request holds per state group: one, or by mamba_cache_mode since it exists."""
    if not run.at_least(catalog.engine.mamba_cache_mode_since):
        return 1
    return (2 if run.prefix_caching else 1) + (run.drafter.tokens if run.drafter is not None else 0)


def _layout(
    run: Run, tp: int, start: int, stop: int, hybrid: bool, last: bool, state_blocks: int = 1
) -> KvLayout:
    full, sliding = _layer_kinds(run, start, stop, hybrid)
    draft = run.drafter if last else None
    if draft is not None:
        full += draft.mtp_layers  # the MTP layers' attention is the target's, in its full group
    state = run.model.state
    states = sum(1 for i in state.state_layers if start <= i < stop) if state is not None else 0
    size, full_groups, sliding_groups, state_groups = group_layout(full, sliding, states)
    per_token = _kv_bytes_per_token_layer(run, tp)
    block = run.block_size
    drafted = run.drafter.tokens if run.drafter is not None else 0
    if state is not None:
        page = state_bytes(state, tp, run.dtype_bytes, drafted)
        block = hybrid_block_size(run.model, block, per_token, page)
    return KvLayout(
        state_layers=states,
        state_groups=state_groups,
        state_blocks=state_blocks,
        bytes_per_token_layer=per_token,
        block_size=block,
        full_layers=full,
        sliding_layers=sliding,
        window=run.model.sliding.window if run.model.sliding is not None else None,
        group_size=size,
        full_groups=full_groups,
        sliding_groups=sliding_groups,
        in_flight_tokens=run.max_num_batched_tokens,
        draft_bytes_per_token=_draft_kv_bytes_per_token(run, tp, draft),
    )


def _draft_kv_bytes_per_token(run: Run, tp: int, draft: Drafter | None) -> int:
    """A separate draft model's KV bytes per token on one GPU (MTP layers count as target layers)."""
    if draft is None or draft.model is None:
        return 0
    return _kv_bytes_per_token_layer(run, tp, draft.model) * draft.model.num_hidden_layers


def _draft_weight_bytes(run: Run, sharding: Sharding, quant_bytes: float | None) -> int:
    """The drafter's weights on one GPU of the last pipeline stage, where vLLM runs it."""
    draft = run.drafter
    if draft is None:
        return 0
    if draft.model is None:
        return draft_layer_bytes(run.model, sharding, run.dtype_bytes, quant_bytes)
    own = Sharding(tp=sharding.tp, vocab_padding=sharding.vocab_padding)
    quant = draft.quant.bytes_per_weight if draft.quant is not None else None
    return stage_weight_bytes(draft.model, own, 1, run.dtype_bytes, quant)[0].total


def _marlin_moe(run: Run) -> bool:
    """Whether vLLM runs this method's MoE experts through Marlin (GPUs below its capability)."""
    quant, spec = run.quant, run.gpu.spec
    if quant is None or quant.marlin_below_compute_capability is None or spec is None:
        return False
    # Marlin is a CUDA kernel; ROCm and XPU run their own MoE kernels
    if spec.vendor != "nvidia" or spec.capability is None:
        return False
    major, minor = quant.marlin_below_compute_capability.split(".")
    return spec.capability < (int(major), int(minor))


def _quant_bytes(run: Run, tp: int) -> float | None:
    """Bytes per quantized weight, with the padding some MoE kernels give the experts' matrices.

    The expert tensors are allocated at padded sizes (hidden size, and on the Marlin path also the
    per-GPU intermediate size), so the bytes per logical weight grow by the padding ratio.
    """
    if run.quant is None:
        return None
    quant, moe = run.quant, run.model.moe
    if run.quant_scope != "experts" or moe is None:
        return quant.bytes_per_weight
    ratio = 1.0
    if quant.expert_hidden_multiple is not None:
        hidden, multiple = run.model.hidden_size, quant.expert_hidden_multiple
        ratio *= math.ceil(hidden / multiple) * multiple / hidden
    if _marlin_moe(run) and quant.marlin_expert_intermediate_multiple is not None:
        inter, multiple = moe.intermediate_size // tp, quant.marlin_expert_intermediate_multiple
        ratio *= math.ceil(inter / multiple) * multiple / inter
    return quant.bytes_per_weight * ratio


def stage_budgets(run: Run, tp: int, catalog: Catalog) -> list[Stage]:
    era = overhead_era(catalog.engine, run.version_t)
    quant_bytes = _quant_bytes(run, tp)
    ep = run.ep(tp)
    sharding = Sharding(
        expert_tp=1 if ep > 1 else tp * run.dp,
        expert_parallel=ep,
        tp=tp,
        vocab_padding=catalog.engine.vocab_padding,
        quant_scope=run.quant_scope,
        unquantized_layers=run.unquantized_layers,
    )
    weights = stage_weight_bytes(run.model, sharding, run.pp, run.dtype_bytes, quant_bytes)
    if run.weight_scale is not None:
        weights = scale_weights(weights, run.weight_scale)
    draft = _draft_weight_bytes(run, sharding, quant_bytes)
    if draft:
        weights[-1] = with_draft(weights[-1], draft)
    in_budget = run.at_least(catalog.engine.cudagraph_profiled_since) and not run.enforce_eager
    hybrid = run.at_least(catalog.engine.hybrid_kv_cache_since)
    state_blocks = _state_blocks(run, catalog)
    stages: list[Stage] = []
    start = 0
    for n, w in zip(pp_layer_counts(run.model.num_hidden_layers, run.pp), weights, strict=True):
        terms = overhead_terms(run, tp, n, era, catalog.engine)
        last = start + n == run.model.num_hidden_layers
        activation = activation_bytes(era.activation, terms.activation)
        stages.append(
            Stage(
                weights=w,
                layout=_layout(run, tp, start, start + n, hybrid, last, state_blocks),
                non_torch=max(0, component_bytes(era.non_torch, terms.non_torch)),
                activation=activation,
                cuda_graph=max(0, component_bytes(era.cuda_graph, terms.cuda_graph)),
                graph_in_budget=in_budget,
                era=era,
                # the encoder runs on the first stage, which holds the vision tower
                encoder_profile=encoder_profile_bytes(run, tp, activation, era) if start == 0 else 0,
            )
        )
        start += n
    return stages


def requested_bytes(run: Run, util: float, catalog: Catalog) -> int:
    ceil = run.at_least(catalog.engine.ceil_requested_since)
    return startup.requested_bytes(run.total_bytes, util, ceil=ceil)


def null_block_bytes(run: Run, layout: KvLayout, catalog: Catalog) -> int:
    return layout.bytes_per_block if run.at_least(catalog.engine.null_block_check_since) else 0


def kv_budget_bytes(run: Run, stage: Stage, requested: int) -> int:
    if run.kv_cache_memory_bytes is not None:
        return run.kv_cache_memory_bytes
    return requested - stage.fixed


def holds_one_request(run: Run, stage: Stage, requested: int, catalog: Catalog) -> bool:
    available = kv_budget_bytes(run, stage, requested)
    need = stage.layout.need_bytes(run.max_model_len) + null_block_bytes(run, stage.layout, catalog)
    return available > 0 and need <= available


def to_gib(value: float) -> float:
    return round(value / GIB, 4)


def logged_pool(run: Run, layout: KvLayout, num_blocks: int, catalog: Catalog) -> tuple[int, float]:
    """(logged KV-cache tokens, max concurrency) in the form the version logs them."""
    engine, block = catalog.engine, layout.block_size
    if not run.at_least(engine.pool_tokens_per_group_since):
        return num_blocks * block, num_blocks * block / run.max_model_len
    concurrency = num_blocks / layout.blocks_per_request(run.max_model_len)
    if run.at_least(engine.pool_tokens_from_concurrency_since):
        return int(concurrency * run.max_model_len), concurrency
    return num_blocks // layout.groups * block, concurrency


def startup_check(run: Run, requested: int, catalog: Catalog) -> StartupCheck:
    """The check as vLLM runs it (no margin), and the largest utilization that would pass."""
    if run.free_gib is None:
        return StartupCheck(free_gib=None, requested_gib=to_gib(requested), passes=None)
    free = round(run.free_gib * GIB)
    exists = run.at_least(catalog.engine.startup_check_since)
    if not exists:
        run.notes.append(
            f"vLLM before {catalog.engine.startup_check_since} has no startup free-memory check."
        )
    return StartupCheck(
        free_gib=run.free_gib,
        requested_gib=to_gib(requested),
        passes=free >= requested if exists else None,
        max_passing_utilization=max_passing_utilization(
            free, run.total_bytes, ceil=run.at_least(catalog.engine.ceil_requested_since)
        ),
    )


def with_checkpoint(run: Run) -> Run:
    """The run with its weights scaled to the checkpoint's safetensors bytes, when they were given."""
    if not run.parameters:
        return run
    if not run.stored_as_loaded and run.quant is not None:
        run.notes.append(
            f"--quantization {run.quant.id} quantizes the checkpoint while loading, so its stored bytes "
            "do not apply; weights are from the formula."
        )
        return run
    sharding = Sharding(quant_scope=run.quant_scope, unquantized_layers=run.unquantized_layers)
    scale, note = checkpoint_scale(run.model, sharding, run.dtype_bytes, _quant_bytes(run, 1), run.parameters)
    run.notes.append(note)
    return msgspec.structs.replace(run, weight_scale=scale)


def with_file_weights(run: Run, catalog: Catalog) -> Run:
    """The run with its weights from the checkpoint: a GGUF file's tensor types, else safetensors totals."""
    counts = type_counts(run.parameters, catalog) if run.parameters else None
    if counts is None and run.gguf is None:
        return with_checkpoint(run)
    if counts is not None:
        described = "its header: " + ", ".join(sorted(counts))
    else:
        assert run.gguf is not None
        counts = file_type_counts(run.model, run.gguf)
        described = _file_type_words(run.gguf)
    total, unknown = gguf_bytes(counts, catalog, run.dtype_bytes)
    elements = sum(counts.values())
    if unknown or not 0.5 <= elements / max(1, parameter_count(run.model)) <= 2.0:
        why = f"unknown tensor types {', '.join(unknown)}" if unknown else "another model's element count"
        run.notes.append(f"The GGUF file has {why}; weights are from the formula.")
        return run
    whole = stage_weight_bytes(run.model, Sharding(), 1, run.dtype_bytes, None)[0]
    run.notes.append(
        f"Weights are the GGUF file's tensor types ({described}; {total / GIB:.2f} GiB), "
        "kept in those types on the GPU and split as vLLM shards them."
    )
    scale = total / (whole.total - whole.rope_cache)
    return msgspec.structs.replace(run, weight_scale=scale, weights_from="the GGUF file's tensor types")


def _file_type_words(file_type: GgufFileType) -> str:
    words = f"{file_type.id}: {file_type.base}, the LM head {file_type.output}"
    if file_type.more_bits is not None:
        words += f", {file_type.more_bits} for attn_v and ffn_down in llama.cpp's more-bits layers"
    return words
