"""Placing a context-free CUDA OOM from what the caller told us: do the weights fit the GPU, and how
much did the failing process hold?

A pasted OOM line with no traceback and no neighbouring lines cannot say when it happened. When the
model is named (request, log or launch command) and the GPU's size is known (the OOM line states it,
or the GPU name carries it), the estimator's budget reads the stage (`budget_reading`): weights
larger than the memory there is can only fail while loading, weights with room for a KV pool did
not, and the allocator's "this process has X memory in use" says how far the process got (below its
weights: loading; at its weights and KV pool: the pool was allocated). Placement weighs what it says
with the other clues (rules/evidence.yaml). For a model the catalog lacks, only a rough size read
from its id says the one certain case (`weights_hint`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

import msgspec

from service.budget import budget_from_facts, find_gpu, find_model, find_quantization, parameter_count
from service.diagnosis.placement import BudgetReading
from service.errors import InputError
from service.first_use import first_use_re
from service.packs.catalog import Catalog, fold_name
from service.packs.evidence import InUseMargins
from service.quantities import COUNT_WORD, count_word
from service.schemas import Budget, Facts, Phase

__all__ = [
    "budget_reading",
    "checkpoint_gib",
    "gpu_gib_told",
    "gpu_named",
    "gpus_counted",
    "model_named",
    "model_params_billion",
    "weights_hint",
]

_PARAMS = first_use_re(r"(?<![\w.])(?:(\d+)x)?(\d+(?:\.\d+)?)\s?[bB](?![a-zA-Z])")
_GPU_GIB = first_use_re(r"(\d{2,3})\s?(?:GB|GiB|G)\b", re.IGNORECASE)
_DEFAULT_WIDTH = "bfloat16"  # what `--dtype auto` gives most checkpoints named without a config


def model_params_billion(model: str) -> float | None:
    """Parameters in billions read from a model id ('Qwen2.5-72B' -> 72, 'Mixtral-8x7B' -> 56)."""
    match = _PARAMS.search(model.rsplit("/", 1)[-1])
    if not match:
        return None
    experts = int(match.group(1)) if match.group(1) else 1
    return experts * float(match.group(2))


# A model named in a person's words: a run of name characters holding a digit ("Qwen2-72B",
# "Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B"), up to three of them spaced ("Llama 3.1 70B").
_NAME_WORD = first_use_re(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*")
# a size class standing alone ("a 13B model", "70b"), not inside a name the catalog lacks
_SIZE_CLASS = first_use_re(r"(?<![A-Za-z0-9_.\-/])(?:(\d+)x)?(\d+(?:\.\d+)?)[bB](?![A-Za-z0-9_.\-])")
_MODEL_WORDS = 3
# a size class is a model's only as one ("a 13B", "the 70b") or before a model's word ("7B model",
# "72B的模型", "1.5B parameters"): "16卡910B" names Ascend's 910B chip
_SIZE_BEFORE = first_use_re(r"\b(?:a|an|the|one|our|my|this|that)\s+$", re.IGNORECASE)
_SIZE_AFTER = first_use_re(
    r"\s*(?:[\w.\-]+\s+){0,2}?(?:models?|llms?|checkpoints?|weights|param\w*)\b|\s*的?\s*(?:大?模型|参数)",
    re.IGNORECASE,
)


def model_named(texts: Iterable[str], catalog: Catalog) -> str | None:
    """The one model a person's words name: a catalog model ("用Qwen2-72B在A800上" → Qwen2-72B-Instruct's
    alias), else one size class ("a 13B model", "Llama-3-70B" → "13B", "70B"); None when they name none
    or several. Only the catalog is read (no network in the classifier)."""
    models: set[str] = set()
    sizes: set[str] = set()
    for text in texts:
        words = [(m.group(), m.start()) for m in _NAME_WORD.finditer(text)]
        for start in range(len(words)):
            for width in range(1, _MODEL_WORDS + 1):
                span = words[start : start + width]
                if len(span) < width or not any(c.isdigit() for c in span[0][0] + span[-1][0]):
                    continue
                gap = text[span[0][1] : span[-1][1] + len(span[-1][0])]
                if width > 1 and not all(c.isspace() or c.isalnum() or c in "._-/" for c in gap):
                    continue
                hit = catalog.index.models.get(fold_name(gap))
                if hit is not None:
                    models.add(hit[0].id)
        sizes.update(
            f"{m.group(1) or 1}x{m.group(2)}B"
            for m in _SIZE_CLASS.finditer(text)
            if _SIZE_BEFORE.search(text[max(0, m.start() - 8) : m.start()])
            or _SIZE_AFTER.match(text[m.end() : m.end() + 30])
        )
    if models:
        return models.pop() if len(models) == 1 else None
    return sizes.pop() if len(sizes) == 1 else None


# The GPU's memory in words: "a 24GB card", "80G显存", "two 16 GB V100s", "24G的卡"
_GPU_MEMORY_TOLD = first_use_re(
    r"(?<![\w.])(\d{1,3})\s?(?:GB|GiB|G)(?:\b\s*(?:of\s+)?(?:vram|gpu|cards?|graphics)\b|\s*的?\s*(?:显存|显卡|卡))"
    r"|(?<![\w.])(\d{1,3})\s?(?:GB|GiB|G)\s+(?:[A-Za-z]+\d+\w*)s?\b",
    re.IGNORECASE,
)


def gpu_gib_told(texts: Iterable[str], catalog: Catalog) -> float | None:
    """The one GPU memory size a person's words give ("a 24GB card", "80G显存", "two 16 GB V100s"), as
    the catalog's cards of that nominal size report it (the median of their totals), else the size."""
    sizes: set[int] = set()
    for text in texts:
        for match in _GPU_MEMORY_TOLD.finditer(text):
            told = match.group(1) or match.group(2)
            if match.group(2) and not _gpu_names(catalog).search(match.group()):
                continue  # "16 GB V100s" names a GPU after the size; "16 GB files" does not
            sizes.add(int(told))
    if len(sizes) != 1:
        return None
    nominal = sizes.pop()
    totals = [g.total_gib for g in catalog.gpus.gpus if g.nominal_gb == nominal]
    return sorted(totals)[len(totals) // 2] if totals else float(nominal)


def checkpoint_gib(facts: dict[str, object], catalog: Catalog) -> float | None:
    """The whole checkpoint's weights in GiB, as loading reads them through host memory: a catalog
    model's parameters, else a size read from its id, at the checkpoint's width."""
    model = facts.get("model")
    if not isinstance(model, str):
        return None
    try:
        params: float | None = float(parameter_count(find_model(catalog, model)[0]))
    except InputError:
        billions = model_params_billion(model)
        params = billions * 1e9 if billions is not None else None
    if params is None:
        return None
    return params * _bytes_per_param(model, facts.get("quantization"), facts.get("dtype"), catalog) / 2**30


def _bytes_per_param(model: str, quantization: object, dtype: object, catalog: Catalog) -> float:
    """Weight width from the catalog: the stated quantization, else a method its id names, else the dtype."""
    if isinstance(quantization, str):
        try:
            return find_quantization(catalog, quantization).bytes_per_weight
        except InputError:
            pass
    named = fold_name(model.rsplit("/", 1)[-1])
    for method in catalog.dtypes.quantization:
        if any(fold_name(word) in named for word in (method.id, *method.aliases)):
            return method.bytes_per_weight
    wanted = dtype if isinstance(dtype, str) and dtype != "auto" else _DEFAULT_WIDTH
    for spec in catalog.dtypes.dtypes:
        if wanted in (spec.id, *spec.aliases):
            return spec.bytes
    return 2.0  # an unknown dtype name: 16-bit, as nearly every checkpoint is


def _gpu_gib(facts: dict[str, object], catalog: Catalog) -> float | None:
    """The GPU's memory: the stated total, else the catalog's for the named GPU, else a size in its name."""
    total = facts.get("total_gib")
    if isinstance(total, float | int) and total > 0:
        return float(total)
    name = str(facts.get("gpu_name") or "")
    if not name:
        return None
    try:
        return find_gpu(catalog, name, None).total_gib
    except InputError:
        sized = _GPU_GIB.search(name)
        return float(sized.group(1)) if sized else None


_SHORT_NAME = 3
_GPU_WORD = first_use_re(r"\b(?:gpus?|cards?|nvidia|tesla|vram|cuda|colab)\b|显卡|卡", re.IGNORECASE)


def _gpu_names(catalog: Catalog) -> re.Pattern[str]:
    # the catalog's index holds the pattern's text; `re` keeps the compiled pattern in its own cache
    return re.compile(catalog.index.gpu_name_pattern, re.IGNORECASE)


def gpu_named(texts: Iterable[str], catalog: Catalog) -> str | None:
    """The one catalog GPU a person's words name ("on the T4 GPU", "4张A100-40G"), or None when they
    name none or several."""
    pattern = _gpu_names(catalog)
    named: set[str] = set()
    for text in texts:
        for match in pattern.finditer(text):
            spec = catalog.index.gpus.get(fold_name(match.group()))
            # a short name ("T4", "A2") is a GPU only in a sentence about one ("the T4 GPU")
            if spec is not None and (len(match.group()) > _SHORT_NAME or _GPU_WORD.search(text)):
                named.add(spec.id)
    return named.pop() if len(named) == 1 else None


# How many of a named GPU: a count before it ("8x A100", "8 x H100", "two 3090s", "8块4090", "4张A100",
# "dual RTX 4090") or after it ("A100 x 8", "4090*2"), the brand words between allowed.
_COUNT_BEFORE = first_use_re(
    rf"(?<![0-9A-Za-z.])({COUNT_WORD})\s*(?:[x×*]|块|张|片|个|台|卡)?\s*(?:(?:nvidia|geforce|rtx|tesla)\s*)*$",
    re.IGNORECASE,
)
_COUNT_AFTER = first_use_re(r"^s?\s*[x×*]\s*(\d{1,3})(?![\w.])", re.IGNORECASE)


def gpus_counted(texts: Iterable[str], catalog: Catalog) -> int | None:
    """How many GPUs a person's words say they have, when they give one count with a catalog GPU's
    name ("8块4090（24G）", "on 2x A100-80G"); None when they give none or several."""
    pattern = _gpu_names(catalog)
    counts: set[int] = set()
    for text in texts:
        for match in pattern.finditer(text):
            before = _COUNT_BEFORE.search(text[max(0, match.start() - 40) : match.start()])
            after = _COUNT_AFTER.match(text[match.end() : match.end() + 12])
            found = before or after
            count = count_word(found.group(1)) if found else None
            if count:
                counts.add(count)
    return counts.pop() if len(counts) == 1 else None


def weights_hint(facts: dict[str, object], catalog: Catalog) -> Phase | None:
    """weights_oom when the named model's weights per GPU exceed the GPU; None when unsure.

    For models the catalog does not hold: the size comes from the id, the widths from the catalog.
    """
    model = facts.get("model")
    gpu_gib = _gpu_gib(facts, catalog)
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
    width = _bytes_per_param(model, facts.get("quantization"), facts.get("dtype"), catalog)
    weights_gib = billions * 1e9 * width / 2**30
    return "weights_oom" if weights_gib / parallel > 0.95 * gpu_gib else None


def _usable_gib(facts: dict[str, object], budget: Budget) -> float:
    """The memory the weights of one GPU must fit in: the card's total less its CUDA context when the
    log states the total (an allocator's "total capacity": the weights load into whatever is there),
    else what vLLM asks of the named GPU (total × gpu_memory_utilization)."""
    if isinstance(facts.get("total_gib"), float | int):
        return budget.total_gib - budget.non_torch_gib
    return budget.requested_gib


def _weights_reading(facts: dict[str, object], loading: Budget) -> Literal["exceed", "room"] | None:
    """Whether the weights per GPU as they load exceed the usable memory, or leave a KV pool larger
    than the estimate's own spread; None in between."""
    if loading.weights_gib > _usable_gib(facts, loading):
        return "exceed"
    spread = loading.sources.get("available_kv_gib")
    margin = spread.uncertainty_gib if spread is not None and spread.uncertainty_gib else 0.0
    return "room" if loading.available_kv_gib > margin else None


def _held_reading(
    held: object, served: Budget, loading: Budget, margins: InUseMargins
) -> Literal["below_weights", "weights_and_pool"] | None:
    """The failing process's in-use memory against its weights per GPU (far below them: still
    loading) and against its weights as they load plus its KV pool (the pool was allocated). Near
    the weights alone it says nothing: the last layer loading and the profiling run both hold them."""
    if not isinstance(held, float | int) or held <= 0:
        return None
    if held < margins.below_weights * served.weights_gib:
        return "below_weights"
    pool = served.available_kv_gib
    if pool > 0 and held >= loading.weights_gib + margins.pool_share * pool:
        return "weights_and_pool"
    return None


def _budget(facts: dict[str, object], catalog: Catalog) -> Budget | None:
    try:
        return budget_from_facts(msgspec.convert(facts, Facts), catalog)
    except (InputError, msgspec.ValidationError):
        return None


def budget_reading(facts: dict[str, object], catalog: Catalog, margins: InUseMargins) -> BudgetReading | None:
    """What the estimator's budget for the model and GPU the facts name says of a bare OOM's stage:
    the weights per GPU against the GPU, and the failing process's in-use memory against them.

    A quantization the checkpoint does not carry is applied after its weights load at their own
    width (vLLM's online quantization), so loading is judged by the budget without it. Only what
    the catalog resolves (no network in the classifier's path); None when the budget cannot be
    sized or says nothing for sure.
    """
    served = _budget(facts, catalog)
    if served is None:
        return None
    loading = served
    if facts.get("quantization") is not None:
        unquantized = _budget({**facts, "quantization": None}, catalog)
        if unquantized is not None and unquantized.weights_gib > served.weights_gib:
            loading = unquantized
    reading = BudgetReading(
        weights=_weights_reading(facts, loading),
        held=_held_reading(facts.get("process_in_use_gib"), served, loading, margins),
    )
    return reading if reading.weights is not None or reading.held is not None else None
