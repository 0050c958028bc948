"""Which tensor- and pipeline-parallel sizes vLLM accepts for a model, and why it rejects the others.

Each rule is one check vLLM makes while building the model (0.33 sources):
- `ModelConfig.verify_with_parallel_config`: the attention heads divide by TP;
- `QKVParallelLinear`: TP divides the KV heads, or is a multiple of them (each KV head replicated);
- `ColumnParallelLinear`/`RowParallelLinear` (`divide`, which asserts): the MLP intermediate size and
  the attention output divide by TP; the MoE experts' intermediate size is split the same way;
- `VocabParallelEmbedding`: the vocabulary, padded to a multiple of 64, divides by TP;
- quantized linear layers: each GPU's input slice is a whole number of quantization groups, and the
  Marlin kernels (`verify_marlin_supports_shape`) need output slices in multiples of min_thread_n and
  input slices in multiples of min_thread_k;
- `get_pp_indices`: every pipeline stage gets at least one layer;
- `FusedMoEParallelConfig.make`: with data parallelism the experts' matrices are sliced over
  TP × DP; with `--enable-expert-parallel` each of the TP × DP GPUs holds whole experts instead
  (`determine_expert_map` gives the first `experts % EP` GPUs one more), so their intermediate size
  is not split at all.
"""

from __future__ import annotations

from service.packs.catalog import EngineFacts, ModelSpec, QuantMethodSpec
from service.packs.derived import ByIdentity

__all__ = [
    "expert_parallel_problem",
    "expert_parallel_size",
    "pipeline_parallel_problem",
    "tensor_parallel_problem",
    "valid_pipeline_parallel_sizes",
    "valid_tensor_parallel_sizes",
]

# vLLM has no ceiling of its own; no single node or NVLink domain has more GPUs than this
MAX_TENSOR_PARALLEL = 64


def _padded_vocab(model: ModelSpec, padding: int) -> int:
    if padding <= 0:
        return model.vocab_size
    return -(-model.vocab_size // padding) * padding


def _dense_mlp(model: ModelSpec) -> bool:
    """Whether some layer runs the dense MLP of `intermediate_size` (every layer of a dense model)."""
    moe = model.moe
    return moe is None or moe.first_dense_layers > 0 or moe.layer_step > 1


def expert_parallel_size(model: ModelSpec, tp: int, dp: int, enabled: bool) -> int:
    """GPUs the experts are split over: TP × DP with expert parallelism on a MoE model, else 1."""
    return tp * dp if enabled and model.moe is not None else 1


def expert_parallel_problem(model: ModelSpec, ep: int) -> str | None:
    """Why an expert-parallel group of `ep` GPUs cannot hold this model's experts, or None."""
    if model.moe is not None and ep > model.moe.num_experts:
        return (
            f"Expert parallelism over {ep} GPUs leaves some GPUs without any of the "
            f"{model.moe.num_experts} experts; use a TP × DP of at most {model.moe.num_experts}."
        )
    return None


def _quant_problem(
    model: ModelSpec, tp: int, quant: QuantMethodSpec, engine: EngineFacts, scope: str, moe_tp: int
) -> str | None:
    """A quantized kernel's shape rule the TP split breaks, or None."""
    # (layer, full input size, input slice per GPU, output slice per GPU)
    slices: list[tuple[str, int, int, int]] = []
    if scope == "linear" and model.mla is None:
        attn_out = model.num_attention_heads * model.kv_head_dim
        slices.append(("o_proj", attn_out, attn_out // tp, model.hidden_size))
    if scope in ("linear", "mlp") and _dense_mlp(model):
        inter = model.intermediate_size
        slices.append(("down_proj", inter, inter // tp, model.hidden_size))
        slices.append(("gate_up_proj", model.hidden_size, model.hidden_size, inter // tp))
    if model.moe is not None:
        inter = model.moe.intermediate_size
        slices.append(("experts' down_proj", inter, inter // moe_tp, model.hidden_size))
    for layer, full, inputs, outputs in slices:
        # GPTQ/AWQ-style groups run along each input row (other methods' groups are blocks or
        # per-tensor scales); vLLM checks them only when a group is smaller than the whole row
        grouped = quant.marlin_linear and quant.group_size is not None and quant.group_size < full
        if grouped and quant.group_size is not None and inputs % quant.group_size:
            return (
                f"{quant.id} stores weights in groups of {quant.group_size}; {layer}'s input split "
                f"over TP {tp} is {inputs}, not a whole number of groups."
            )
        if quant.marlin_linear and inputs % engine.marlin_min_thread_k:
            return (
                f"{quant.id}'s Marlin kernel needs each GPU's {layer} input to be a multiple of "
                f"min_thread_k = {engine.marlin_min_thread_k}; at TP {tp} it is {inputs}."
            )
        if quant.marlin_linear and outputs % engine.marlin_min_thread_n:
            return (
                f"{quant.id}'s Marlin kernel needs each GPU's {layer} output to be a multiple of "
                f"min_thread_n = {engine.marlin_min_thread_n}; at TP {tp} it is {outputs}."
            )
    return None


def tensor_parallel_problem(
    model: ModelSpec,
    tp: int,
    engine: EngineFacts,
    quant: QuantMethodSpec | None = None,
    quant_scope: str = "linear",
    *,
    dp: int = 1,
    ep: int = 1,
) -> str | None:
    """Why vLLM rejects `tp` for this model (a sentence), or None when it accepts it.

    `dp` and `ep` only change how the experts split: sliced over TP × DP, or whole over `ep` GPUs.
    """
    moe_tp = 1 if ep > 1 else tp * dp
    heads, kv_heads = model.num_attention_heads, model.num_key_value_heads
    if heads % tp:
        return f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
    if model.mla is None and (kv_heads % tp if tp < kv_heads else tp % kv_heads):
        return (
            f"The {kv_heads} KV heads neither divide by TP {tp} nor does TP {tp} divide into "
            "whole replicas of them."
        )
    if _dense_mlp(model) and model.intermediate_size % tp:
        return f"The MLP intermediate size {model.intermediate_size} does not divide by TP {tp}."
    if (problem := expert_parallel_problem(model, ep)) is not None:
        return problem
    if model.moe is not None and model.moe.intermediate_size % moe_tp:
        split = f"TP {tp}" if moe_tp == tp else f"TP {tp} × DP {dp} = {moe_tp}"
        return f"The experts' intermediate size {model.moe.intermediate_size} does not divide by {split}."
    shared = model.moe.shared_intermediate_size if model.moe is not None else None
    if shared is not None and shared % tp:
        return f"The shared experts' intermediate size {shared} does not divide by TP {tp}."
    vocab = _padded_vocab(model, engine.vocab_padding)
    if vocab % tp:
        return f"The vocabulary padded to {vocab} does not divide by TP {tp}."
    if quant is not None:
        return _quant_problem(model, tp, quant, engine, quant_scope, moe_tp)
    return None


def valid_tensor_parallel_sizes(
    model: ModelSpec,
    engine: EngineFacts,
    quant: QuantMethodSpec | None = None,
    quant_scope: str = "linear",
    upper: int = MAX_TENSOR_PARALLEL,
    *,
    dp: int = 1,
    expert_parallel: bool = False,
) -> list[int]:
    """Every TP size up to `upper` that vLLM accepts for this model, ascending (1 always included)."""
    owners, params = (model, engine, quant), (quant_scope, upper, dp, expert_parallel)
    known = _SIZES.get(owners, params)
    if known is None:
        known = tuple(_valid_sizes(model, engine, quant, quant_scope, upper, dp, expert_parallel))
        _SIZES.put(owners, params, known)
    return list(known)


# the TP sizes of a catalog model, asked by every budget and by the fixes: decided once per model
_SIZES: ByIdentity[tuple[int, ...]] = ByIdentity(1024)


def _valid_sizes(
    model: ModelSpec,
    engine: EngineFacts,
    quant: QuantMethodSpec | None,
    quant_scope: str,
    upper: int,
    dp: int,
    expert_parallel: bool,
) -> list[int]:
    sizes = [
        tp
        for tp in range(1, upper + 1)
        if tensor_parallel_problem(
            model,
            tp,
            engine,
            quant,
            quant_scope,
            dp=dp,
            ep=expert_parallel_size(model, tp, dp, expert_parallel),
        )
        is None
    ]
    return sizes or [1]


def pipeline_parallel_problem(model: ModelSpec, pp: int) -> str | None:
    """Why vLLM cannot split this model over `pp` stages, or None."""
    if pp > model.num_hidden_layers:
        return f"pipeline_parallel_size {pp} exceeds the model's {model.num_hidden_layers} layers."
    return None


def valid_pipeline_parallel_sizes(model: ModelSpec, upper: int) -> list[int]:
    """Every PP size up to `upper` that gives each stage at least one layer, ascending."""
    return [pp for pp in range(1, upper + 1) if pipeline_parallel_problem(model, pp) is None]
