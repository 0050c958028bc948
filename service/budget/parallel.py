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
- `get_pp_indices`: every pipeline stage gets at least one layer.
"""

from __future__ import annotations

from service.packs.catalog import EngineFacts, ModelSpec, QuantMethodSpec

__all__ = [
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


def _quant_problem(
    model: ModelSpec, tp: int, quant: QuantMethodSpec, engine: EngineFacts, scope: str
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
        slices.append(("experts' down_proj", inter, inter // tp, model.hidden_size))
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
) -> str | None:
    """Why vLLM rejects `tp` for this model (a sentence), or None when it accepts it."""
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
    if model.moe is not None and model.moe.intermediate_size % tp:
        return f"The experts' intermediate size {model.moe.intermediate_size} does not divide by TP {tp}."
    shared = model.moe.shared_intermediate_size if model.moe is not None else None
    if shared is not None and shared % tp:
        return f"The shared experts' intermediate size {shared} does not divide by TP {tp}."
    vocab = _padded_vocab(model, engine.vocab_padding)
    if vocab % tp:
        return f"The vocabulary padded to {vocab} does not divide by TP {tp}."
    if quant is not None:
        return _quant_problem(model, tp, quant, engine, quant_scope)
    return None


def valid_tensor_parallel_sizes(
    model: ModelSpec,
    engine: EngineFacts,
    quant: QuantMethodSpec | None = None,
    quant_scope: str = "linear",
    upper: int = MAX_TENSOR_PARALLEL,
) -> list[int]:
    """Every TP size up to `upper` that vLLM accepts for this model, ascending (1 always included)."""
    sizes = [
        tp
        for tp in range(1, upper + 1)
        if tensor_parallel_problem(model, tp, engine, quant, quant_scope) is None
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
