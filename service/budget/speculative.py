"""Speculative decoding's memory: the drafter's weights and the KV cache its attention layers keep.

vLLM builds the drafter inside the worker's model loading (so "Model loading took" includes it) and
gives every drafter attention layer a KV cache like the target's (vllm/v1/spec_decode). An MTP method
(`mtp`, or vLLM's `<family>_mtp` names) runs the checkpoint's own multi-token-prediction layers,
which share the target's embedding and LM head; `num_speculative_tokens` beyond their number reuses
them, so the KV cache grows by the MTP layers, not by the tokens drafted. A method with a `model`
(draft_model, eagle, eagle3, medusa) loads that model beside the target on the same TP group. ngram
and suffix decoding draft from the prompt and need no memory.
"""

from __future__ import annotations

import msgspec

from service.budget.resolve import find_model, find_quantization
from service.errors import InvalidConfigError
from service.packs.catalog import Catalog, ModelSpec, QuantMethodSpec
from service.schemas import SpeculativeConfig

__all__ = ["Drafter", "resolve_drafter"]


class Drafter(msgspec.Struct, frozen=True):
    """What speculates: the target's own MTP layers, or a separate draft model."""

    method: str
    tokens: int
    mtp_layers: int = 0
    model: ModelSpec | None = None
    quant: QuantMethodSpec | None = None


def _is_mtp(method: str) -> bool:
    return method == "mtp" or method.endswith("_mtp")


def resolve_drafter(config: SpeculativeConfig | None, target: ModelSpec, catalog: Catalog) -> Drafter | None:
    """The drafter a --speculative-config loads, or None when it loads nothing."""
    if config is None:
        return None
    if config.num_speculative_tokens < 1:
        raise InvalidConfigError(
            f"num_speculative_tokens must be at least 1, not {config.num_speculative_tokens}."
        )
    method = (config.method or ("draft_model" if config.model else "")).lower()
    if _is_mtp(method):
        if target.mtp_layers == 0:
            raise InvalidConfigError(
                f"{target.id} has no multi-token-prediction layers (num_nextn_predict_layers), so "
                f"--speculative-config method {method} has nothing to draft with."
            )
        return Drafter(method=method, tokens=config.num_speculative_tokens, mtp_layers=target.mtp_layers)
    if config.model is None:
        return None
    draft, checkpoint = find_model(catalog, config.model)
    quant = find_quantization(catalog, checkpoint.method) if checkpoint is not None else None
    return Drafter(method=method, tokens=config.num_speculative_tokens, model=draft, quant=quant)
