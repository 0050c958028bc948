"""What a calculator sees: the facts (merged from log, snapshot, budget and catalog), and its answer.

Calculators are pure: they read a FixContext and return Proposals. The context is built once per
diagnosis; only `flag` (the recipe's flag spelled for the user's version) differs per recipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from service.fixes.command import ParsedCommand
from service.packs.fixes import FixPack
from service.schemas import Budget, Facts, Finding, GpuInfo, Phase, Snapshot
from service.versions import Version, VersionSpan

__all__ = ["GIB", "Catalog", "FixContext", "GpuChoice", "Proposal"]

GIB = 2**30


class Catalog(Protocol):
    """What the fixes need from the model and GPU catalog (the budget's catalog provides it)."""

    def gpu_supports_fp8(self, gpu: str) -> bool | None:
        """Whether the GPU has native fp8 (for an fp8 KV cache), or None when unknown."""

    def gpu_compute_capability(self, gpu: str) -> str | None:
        """The GPU's compute capability ("7.5"), or None when the GPU is not in the catalog."""

    def attention_heads(self, model: str) -> int | None:
        """The model's number of attention heads, or None when the model is unknown."""

    def max_context(self, model: str) -> int | None:
        """The model's native context length (max_position_embeddings after RoPE scaling), if known."""

    def gpus_with_memory(self, min_total_gib: float) -> list[tuple[str, float]]:
        """Catalog GPUs with at least this much memory, smallest first, as (name, total GiB)."""

    def checkpoints(self, model: str) -> list[tuple[str, str]]:
        """Published quantized checkpoints of the model, as (Hugging Face id, method)."""

    def tensor_parallel_sizes(self, model: str, quantization: str | None = None) -> list[int] | None:
        """Every tensor-parallel size vLLM accepts for the model, ascending; None when it is unknown."""

    def reestimate(
        self,
        budget: Budget,
        *,
        model: str | None = None,
        gpu_memory_utilization: float | None = None,
        tensor_parallel_size: int | None = None,
        kv_cache_dtype: str | None = None,
        max_model_len: int | None = None,
        quantization: str | None = None,
    ) -> Budget | None:
        """The budget again with the given inputs changed (None when it cannot be computed)."""


class GpuChoice(msgspec.Struct, frozen=True):
    """A GPU from the snapshot that could run the model instead."""

    index: int
    name: str
    free_gib: float
    total_gib: float


class Proposal(msgspec.Struct, frozen=True):
    """One concrete fix a calculator proposes: a single change and its expected effect."""

    change: str
    why: str
    source: tuple[str, ...] = ()
    exact: bool = True
    needs: tuple[str, ...] = ()
    likelihood: float = 1.0
    title: str | None = None


class FixContext(msgspec.Struct, frozen=True):
    """Everything known about the failure, for calculators to read."""

    phase: Phase
    facts: Facts
    sources: Mapping[str, str]
    pack: FixPack
    findings: Sequence[Finding] = ()
    lines: Sequence[str] = ()
    budget: Budget | None = None
    snapshot: Snapshot | None = None
    gpu: GpuInfo | None = None
    version: Version | None = None
    span: VersionSpan = (None,)
    floor_known: bool = False
    command: ParsedCommand | None = None
    catalog: Catalog | None = None
    gpus_present: int | None = None
    flag: str | None = None
    # the fired rules and the decisive lines as `readings.said_text` joins them, once per diagnosis
    said: str | None = None

    def with_flag(self, flag: str | None) -> FixContext:
        """This context for a recipe whose flag is spelled `flag` (the one thing that differs per
        recipe): msgspec's shallow copy in C, no `__init__` run."""
        return msgspec.structs.replace(self, flag=flag)

    def source(self, fact: str) -> str:
        """Where a fact came from, as a short label for `Fix.source` (e.g. `line 812`)."""
        return self.sources.get(fact, "log")

    def sources_of(self, *facts: str) -> tuple[str, ...]:
        labels: list[str] = []
        for fact in facts:
            label = self.source(fact)
            if label not in labels:
                labels.append(label)
        return tuple(labels)

    def missing(self, *facts: str) -> tuple[str, ...]:
        return tuple(name for name in facts if getattr(self.facts, name) is None)

    def flag_exists(self, name: str) -> bool:
        """Whether the flag exists in the user's version, per the flag history."""
        spec = self.pack.flag(name)
        return spec is None or all(spec.exists(v) for v in self.span)
