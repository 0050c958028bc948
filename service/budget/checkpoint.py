"""Weights from the checkpoint's own bytes: the safetensors header totals, as hf-mem counts them.

The architecture formula (`weights.py`) knows how vLLM shards a model but counts parameters from
config.json, which misses what it does not model (linear-attention mixers, vision towers it does not
know, odd biases) and estimates quantized sizes from bits per weight. The safetensors headers state
every tensor's dtype and shape, so their totals are the exact bytes on disk, packed weights, scales and
zero points included. This module scales the formula's per-GPU split to those bytes: the formula says
which share each GPU holds, the checkpoint says how many bytes there are.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from service.budget.weights import Sharding, WeightBytes, draft_layer_bytes, stage_weight_bytes
from service.packs.catalog import ModelSpec

__all__ = ["CheckpointBytes", "checkpoint_bytes", "checkpoint_scale", "scale_weights"]

# Bytes per element of each safetensors dtype (the format's own table, huggingface/safetensors).
# Float tensors that vLLM casts to the served dtype are counted at that dtype instead.
_ELEMENT_BYTES: dict[str, float] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "F4": 0.5,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
_CAST_TO_SERVED = {"F16", "BF16", "F32", "F64"}
# A checkpoint whose bytes differ from the formula by more than this is not the architecture the
# formula describes (another model's config, a partial upload): the formula stands, with a note.
_PLAUSIBLE = (0.5, 2.0)


class CheckpointBytes(msgspec.Struct, frozen=True):
    """The checkpoint's bytes as vLLM loads them, and how many of its float tensors were cast."""

    total: int
    unknown_dtypes: tuple[str, ...]


def checkpoint_bytes(parameters: Mapping[str, int], served_dtype_bytes: float) -> CheckpointBytes:
    """Bytes of a checkpoint from its per-dtype parameter counts, floats at the served dtype."""
    total = 0.0
    unknown: list[str] = []
    for dtype, count in parameters.items():
        key = dtype.upper()
        if key in _CAST_TO_SERVED:
            total += count * served_dtype_bytes
        elif key in _ELEMENT_BYTES:
            total += count * _ELEMENT_BYTES[key]
        else:
            unknown.append(dtype)
    return CheckpointBytes(total=int(total), unknown_dtypes=tuple(sorted(unknown)))


def _formula_total(
    model: ModelSpec, sharding: Sharding, dtype_bytes: float, quant_bytes: float | None
) -> int:
    """Unsharded, unpadded checkpoint bytes the formula predicts (no rotary cache: it is not stored)."""
    whole = Sharding(quant_scope=sharding.quant_scope, unquantized_layers=sharding.unquantized_layers)
    stage = stage_weight_bytes(model, whole, 1, dtype_bytes, quant_bytes)[0]
    return stage.total - stage.rope_cache


def checkpoint_scale(
    model: ModelSpec,
    sharding: Sharding,
    dtype_bytes: float,
    quant_bytes: float | None,
    parameters: Mapping[str, int],
) -> tuple[float | None, str]:
    """The factor from the formula's weight bytes to the checkpoint's, and a note saying what it used.

    None when the checkpoint cannot stand for the served weights (unknown dtypes, or a size the
    formula's architecture cannot have); the note then says why the formula stands.
    """
    checkpoint = checkpoint_bytes(parameters, dtype_bytes)
    if checkpoint.unknown_dtypes:
        unknown = ", ".join(checkpoint.unknown_dtypes)
        return None, f"The checkpoint has tensors of unknown dtype ({unknown}); weights are from the formula."
    formula = _formula_total(model, sharding, dtype_bytes, quant_bytes)
    whole = Sharding(quant_scope=sharding.quant_scope, unquantized_layers=sharding.unquantized_layers)
    skipped = draft_layer_bytes(model, whole, dtype_bytes, quant_bytes)
    loaded = checkpoint.total - skipped
    if formula <= 0 or loaded <= 0:
        return None, "The checkpoint's safetensors totals are empty; weights are from the formula."
    ratio = loaded / formula
    gib = loaded / 2**30
    if not _PLAUSIBLE[0] <= ratio <= _PLAUSIBLE[1]:
        return None, (
            f"The checkpoint holds {gib:.2f} GiB but its config.json describes {formula / 2**30:.2f} GiB; "
            "weights are from the formula."
        )
    draft = (
        f", less {skipped / 2**30:.2f} GiB of MTP draft layers vLLM loads only to speculate"
        if skipped
        else ""
    )
    return (
        ratio,
        f"Weights are the checkpoint's safetensors bytes ({gib:.2f} GiB{draft}), split as vLLM shards them.",
    )


def scale_weights(stages: list[WeightBytes], scale: float) -> list[WeightBytes]:
    """Per-GPU weights scaled to the checkpoint's bytes; the rotary cache is not stored, so it stays."""
    scaled = []
    for s in stages:
        quantized, unquantized = int(s.quantized * scale), int(s.unquantized * scale)
        scaled.append(
            WeightBytes(
                total=quantized + unquantized + s.rope_cache,
                quantized=quantized,
                unquantized=unquantized,
                rope_cache=s.rope_cache,
            )
        )
    return scaled
