"""Placing a context-free CUDA OOM from what the caller told us: do the weights alone fit the GPU?

A pasted OOM line with no traceback and no neighbouring lines cannot say when it happened. When the
model is named (request or log) and the GPU's size is known (the OOM line states it, or the GPU name
carries it), a rough weight size decides the one case that is certain: weights larger than the GPU
can only fail while loading. Anything else stays undecided here (the budget part refines it).
"""

from __future__ import annotations

import re

import msgspec

from service.budget import budget_from_facts
from service.errors import InputError
from service.packs.catalog import Catalog
from service.schemas import Facts, Phase

__all__ = ["budget_hint", "model_params_billion", "weights_hint"]

_PARAMS = re.compile(r"(?<![\w.])(?:(\d+)x)?(\d+(?:\.\d+)?)\s?[bB](?![a-zA-Z])")
_FOUR_BIT = re.compile(r"awq|gptq|int4|4bit|4-bit|bnb|nf4|mxfp4|nvfp4|w4a16|q4", re.IGNORECASE)
_EIGHT_BIT = re.compile(r"fp8|int8|8bit|8-bit|w8a8|w8a16|q8", re.IGNORECASE)
_GPU_GIB = re.compile(r"(\d{2,3})\s?(?:GB|GiB|G)\b", re.IGNORECASE)
# Memory of common cards whose names do not carry it (the catalog has the full list).
_KNOWN_GPUS = (
    ("h200", 141.0),
    ("h100", 79.19),
    ("h20", 95.0),
    ("a100", 79.19),
    ("4090", 23.55),
    ("3090", 23.56),
    ("l40", 44.39),
    ("a6000", 47.4),
    ("a10", 22.07),
    ("l4", 22.03),
    ("t4", 14.75),
    ("v100", 31.74),
)


def model_params_billion(model: str) -> float | None:
    """Parameters in billions read from a model id ('Qwen2.5-72B' -> 72, 'Mixtral-8x7B' -> 56)."""
    match = _PARAMS.search(model.rsplit("/", 1)[-1])
    if not match:
        return None
    experts = int(match.group(1)) if match.group(1) else 1
    return experts * float(match.group(2))


def _bytes_per_param(model: str, quantization: object, dtype: object) -> float:
    text = f"{model} {quantization or ''}"
    if _FOUR_BIT.search(text):
        return 0.55
    if _EIGHT_BIT.search(text):
        return 1.0
    return 4.0 if dtype == "float32" else 2.0


def _gpu_gib(facts: dict[str, object]) -> float | None:
    total = facts.get("total_gib")
    if isinstance(total, float | int) and total > 0:
        return float(total)
    name = str(facts.get("gpu_name") or "").lower()
    if not name:
        return None
    sized = _GPU_GIB.search(name)
    if sized:
        return float(sized.group(1))
    return next((gib for key, gib in _KNOWN_GPUS if key in name), None)


def weights_hint(facts: dict[str, object]) -> Phase | None:
    """weights_oom when the named model's weights per GPU exceed the GPU; None when unsure."""
    model = facts.get("model")
    gpu_gib = _gpu_gib(facts)
    if not isinstance(model, str) or gpu_gib is None:
        return None
    billions = model_params_billion(model)
    if billions is None:
        return None
    parallel = 1
    for name in ("tensor_parallel_size", "pipeline_parallel_size"):
        value = facts.get(name)
        if isinstance(value, int) and value > 0:
            parallel *= value
    weights_gib = (
        billions * 1e9 * _bytes_per_param(model, facts.get("quantization"), facts.get("dtype")) / 2**30
    )
    return "weights_oom" if weights_gib / parallel > 0.95 * gpu_gib else None


def budget_hint(facts: dict[str, object], catalog: Catalog) -> Phase | None:
    """weights_oom when the catalog's budget puts the weights per GPU above the GPU's memory."""
    try:
        budget = budget_from_facts(msgspec.convert(facts, Facts), catalog)
    except (InputError, msgspec.ValidationError):
        return None
    if budget is None:
        return None
    return "weights_oom" if budget.weights_gib > 0.95 * budget.total_gib else None
