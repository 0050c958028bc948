"""Calibration from what people paste: the estimator's error against the memory profile vLLM logged.

A log that states its configuration (model, GPU, lengths, utilization …) and vLLM's measured figures
(weights, activation peak, non-torch, CUDA graphs, KV cache memory) is one real start-up. The
estimator is asked for the same inputs, and the difference per figure is one sample: numbers, the
model, its family, the GPU and the vLLM version, never log text. Samples group by model family, GPU
and vLLM minor; once a group has enough of them, the estimate's note cites its error.
Pure: no I/O; the service stores the samples (service.calibration_store).
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from collections.abc import Iterable

import msgspec

from service.budget import budget_from_facts, find_model, in_catalog
from service.diagnosis.misleading import arithmetic_facts
from service.packs import RulePacks
from service.schemas import (
    Budget,
    CalibrationFigure,
    CalibrationGroup,
    CalibrationSample,
    Diagnosis,
)
from service.versions import parse_version

__all__ = ["FIGURES", "calibration_note", "calibration_sample", "family_of", "minor_of", "summarize"]

# figure -> (the fact vLLM logged, how the estimate's Budget gives the same figure)
FIGURES: dict[str, str] = {
    "weights_gib": "model_weights_gib",
    "activation_peak_gib": "peak_activation_gib",
    "non_torch_gib": "non_torch_gib",
    "cuda_graph_gib": "cuda_graph_gib",
    "weights_non_torch_gib": "weights_non_torch_gib",
    "available_kv_gib": "available_kv_cache_gib",
}
# a weights figure alone calibrates nothing the estimator guesses: it is the checkpoint's size
_ESTIMATED = frozenset(FIGURES) - {"weights_gib"}


def _predicted(budget: Budget, figure: str) -> float:
    if figure == "weights_non_torch_gib":
        return budget.weights_gib + budget.non_torch_gib
    value: float = getattr(budget, figure)
    return value


def minor_of(version: str | None) -> str | None:
    parsed = parse_version(version) if version else None
    return None if parsed is None else f"{parsed[0]}.{parsed[1]}"


def calibration_sample(diagnosis: Diagnosis, packs: RulePacks) -> CalibrationSample | None:
    """The estimator's error on this log's start-up, or None when the log states too little to compare.

    The prediction leaves out what the log measured (its KV memory, the free memory at a failure):
    it is what `vramdoc estimate` answers for the configuration alone. A figure a known logging bug
    makes misleading is not compared.
    """
    facts = arithmetic_facts(diagnosis)
    measured = {
        figure: float(value)
        for figure, fact in FIGURES.items()
        if (value := getattr(facts, fact)) is not None
    }
    if not measured.keys() & _ESTIMATED or not facts.model or not in_catalog(packs.catalog, facts.model):
        return None
    configuration = msgspec.structs.replace(facts, available_kv_cache_gib=None, free_gib=None)
    budget = budget_from_facts(configuration, packs.catalog)
    if budget is None:
        return None
    predicted = {figure: round(_predicted(budget, figure), 4) for figure in measured}
    parts = {
        "model": facts.model,
        "family": family_of(facts.model, packs),
        "gpu": budget.gpu,
        "total_gib": budget.total_gib,
        "vllm_version": facts.vllm_version,
        "vllm_minor": minor_of(facts.vllm_version),
        "tensor_parallel_size": budget.tensor_parallel_size,
        "pipeline_parallel_size": budget.pipeline_parallel_size,
        "dtype": facts.dtype,
        "quantization": facts.quantization,
        "kv_cache_dtype": facts.kv_cache_dtype,
        "block_size": facts.block_size,
        "gpu_memory_utilization": facts.gpu_memory_utilization,
        "max_model_len": facts.max_model_len,
        "max_num_seqs": facts.max_num_seqs,
        "max_num_batched_tokens": facts.max_num_batched_tokens,
        "enforce_eager": facts.enforce_eager,
        "measured": measured,
        "predicted": predicted,
    }
    key = hashlib.sha256(msgspec.json.encode(parts)).hexdigest()[:16]
    return msgspec.convert({"key": key, **parts}, CalibrationSample)


def summarize(samples: Iterable[CalibrationSample], min_samples: int) -> list[CalibrationGroup]:
    """The error per figure of each model family × GPU × vLLM minor, largest groups first.

    Error is predicted − measured (GiB): positive means the estimator expected more than vLLM used.
    """
    groups: dict[tuple[str | None, str, str | None], list[CalibrationSample]] = defaultdict(list)
    for sample in samples:
        groups[(sample.family, sample.gpu, sample.vllm_minor)].append(sample)
    summary = []
    for (family, gpu, minor), members in groups.items():
        figures = {}
        for figure in FIGURES:
            errors = [s.predicted[figure] - s.measured[figure] for s in members if figure in s.measured]
            if errors:
                figures[figure] = CalibrationFigure(
                    samples=len(errors),
                    mean_error_gib=round(statistics.fmean(errors), 4),
                    mean_abs_error_gib=round(statistics.fmean(abs(e) for e in errors), 4),
                    max_abs_error_gib=round(max(abs(e) for e in errors), 4),
                )
        summary.append(
            CalibrationGroup(
                family=family,
                gpu=gpu,
                vllm_minor=minor,
                samples=len(members),
                enough=len(members) >= min_samples,
                figures=figures,
            )
        )
    return sorted(summary, key=lambda g: (-g.samples, g.family or "", g.gpu, g.vllm_minor or ""))


def calibration_note(budget: Budget, family: str | None, groups: Iterable[CalibrationGroup]) -> str | None:
    """The sentence an estimate carries when its family, GPU and vLLM minor have enough samples."""
    minor = minor_of(budget.vllm_version)
    group = next(
        (g for g in groups if (g.family, g.gpu, g.vllm_minor) == (family, budget.gpu, minor) and g.enough),
        None,
    )
    kv = group.figures.get("available_kv_gib") if group is not None else None
    if group is None or kv is None:
        return None
    direction = "above" if kv.mean_error_gib > 0 else "below"
    return (
        f"Calibrated on {group.samples} pasted start-ups of {family} models on {budget.gpu} with vLLM "
        f"{minor}: the estimated KV cache memory was {abs(kv.mean_error_gib):.2f} GiB {direction} what "
        f"vLLM measured on average (mean absolute error {kv.mean_abs_error_gib:.2f} GiB)."
    )


def family_of(model: str, packs: RulePacks) -> str | None:
    """The catalog family of a model (the unit calibration groups by), if the catalog knows it."""
    return find_model(packs.catalog, model)[0].family if in_catalog(packs.catalog, model) else None
