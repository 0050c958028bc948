"""Fingerprints of diagnoses, so a team recognises a failure it met before (issue 16).

A fingerprint keeps ids and rounded numbers only, never log text: the phase, the root rule, the
model, the GPU, vLLM's minor version and the decisive sizes bucketed so that the same mistake on
another host (a few MiB more or less free, 32000 or 32768 tokens) maps to the same key.
Pure: no I/O; the shells store it.
"""

from __future__ import annotations

import hashlib
import math

import msgspec

from service.packs import RulePacks
from service.schemas import Diagnosis, Facts, Fingerprint, Phase
from service.versions import parse_version

__all__ = ["fingerprint"]

_NOT_FAILURES: frozenset[Phase] = frozenset({"no_failure"})
_UTILIZATION_STEP = 0.05


def _length_bucket(tokens: int | None) -> float | None:
    """The power of two at or above a token count: 30000 and 32768 are the same length class."""
    if tokens is None or tokens <= 0:
        return None
    return float(2 ** math.ceil(math.log2(tokens)))


def _utilization_bucket(value: float | None) -> float | None:
    if value is None or value <= 0:
        return None
    return round(round(value / _UTILIZATION_STEP) * _UTILIZATION_STEP, 2)


def _minor(diagnosis: Diagnosis) -> str | None:
    text = diagnosis.facts.vllm_version
    if text is None and not diagnosis.engine.assumed:
        text = diagnosis.engine.version
    parsed = parse_version(text) if text else None
    return None if parsed is None else f"{parsed[0]}.{parsed[1]}"


_ROOT_KINDS = frozenset({"failure", "oom"})


def _root_rule(diagnosis: Diagnosis, packs: RulePacks) -> str | None:
    """The first error finding of the root phase that is a failure or an OOM (never a wrapper such as
    "EngineCore failed to start", which every startup failure prints), else the first error finding."""
    errors = [f for f in diagnosis.findings if f.phase == diagnosis.phase and f.severity == "error"]
    for finding in errors:
        compiled = packs.signatures.by_id.get(finding.rule)
        if compiled is not None and compiled.rule.kind in _ROOT_KINDS:
            return finding.rule
    return errors[0].rule if errors else None


def _numbers(facts: Facts, has_gpu_name: bool) -> dict[str, float]:
    candidates: dict[str, float | None] = {
        "max_model_len": _length_bucket(facts.max_model_len),
        "estimated_max_model_len": _length_bucket(facts.estimated_max_model_len),
        "gpu_memory_utilization": _utilization_bucket(facts.gpu_memory_utilization),
        "tensor_parallel_size": float(facts.tensor_parallel_size) if facts.tensor_parallel_size else None,
        "pipeline_parallel_size": float(facts.pipeline_parallel_size)
        if facts.pipeline_parallel_size
        else None,
        # The GPU's size stands in for its name only when the log does not name it.
        "total_gib": float(round(facts.total_gib)) if facts.total_gib and not has_gpu_name else None,
    }
    return {name: value for name, value in sorted(candidates.items()) if value is not None}


def fingerprint(diagnosis: Diagnosis, packs: RulePacks) -> Fingerprint | None:
    """The fingerprint of a failure; None for a healthy log, which is nothing to remember."""
    if diagnosis.phase in _NOT_FAILURES:
        return None
    budget = diagnosis.budget
    model = diagnosis.facts.model or (budget.model if budget else None)
    gpu = diagnosis.facts.gpu_name or (budget.gpu if budget else None)
    parts = {
        "phase": diagnosis.phase,
        "rule": _root_rule(diagnosis, packs),
        "model": model.lower() if model else None,
        "gpu": gpu,
        "vllm_minor": _minor(diagnosis),
        "numbers": _numbers(diagnosis.facts, gpu is not None),
    }
    key = hashlib.sha256(msgspec.json.encode(parts)).hexdigest()[:16]
    return msgspec.convert({"key": key, **parts}, Fingerprint)
