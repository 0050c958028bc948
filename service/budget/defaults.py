"""vLLM's engine defaults read from `rules/catalog/engines.yaml`: the one place both the budget and
the fixes learn what `vllm serve` picks when a flag is not given.

The scheduler tiers follow `EngineArgs` (`_set_default_args_v1`, later `get_batch_defaults`): a
device of at least the tier's memory gets its values unless its name contains an excluded word
(vLLM tests `"a100" not in device_name`).
"""

from __future__ import annotations

from typing import TypeVar

from service.packs.catalog import (
    DefaultsEra,
    EngineFacts,
    Stepped,
    TierDefaults,
    fold_name,
    version_tuple,
)

__all__ = ["default_utilization", "era_at", "scheduler_defaults", "v0_scheduler_defaults"]

Release = tuple[int, int, int]
_E = TypeVar("_E", DefaultsEra, Stepped)


def era_at(entries: list[_E], version: Release) -> _E:
    """The entry in force at `version`; releases older than the catalog's first use its first entry."""
    current = [e for e in entries if version_tuple(e.since) <= version]
    return current[-1] if current else entries[0]


def default_utilization(engine: EngineFacts, version: Release) -> float:
    """`--gpu-memory-utilization` when none is given."""
    return era_at(engine.gpu_memory_utilization, version).value


def scheduler_defaults(
    engine: EngineFacts,
    version: Release,
    gpu_name: str | None,
    total_gib: float | None,
    *,
    offline: bool = False,
) -> tuple[int, int] | None:
    """(max_num_seqs, max_num_batched_tokens) `vllm serve` (or, `offline`, the `LLM(...)` class)
    picks on this device and release.

    None when the tier depends on what is not known: the GPU's memory, or its name.
    """
    tiers = era_at(engine.defaults, version).tiers
    if total_gib is None:
        return _pair(tiers[0], offline) if len(tiers) == 1 else None
    folded = fold_name(gpu_name) if gpu_name is not None else None
    for tier in tiers:
        if total_gib < tier.min_total_gib:
            continue
        if tier.exclude and folded is None:
            return None
        if folded is not None and any(fold_name(word) in folded for word in tier.exclude):
            continue
        return _pair(tier, offline)
    raise AssertionError("the last tier has min_total_gib 0")


def _pair(tier: TierDefaults, offline: bool) -> tuple[int, int]:
    batched = tier.offline_max_num_batched_tokens if offline else None
    return tier.max_num_seqs, batched or tier.max_num_batched_tokens


def v0_scheduler_defaults(engine: EngineFacts) -> tuple[int, int] | None:
    """(max_num_seqs, max_num_batched_tokens) of the V0 engine, which a run that chose it
    (VLLM_USE_V1=0) on a release whose default is V1 still gets: 0.8-0.10's `_set_default_args_v0`
    sets 256 sequences and leaves the token budget to V0's scheduler. They are the defaults in force
    in the last release before V1's, the end of the catalog's whole-prompt (V0) overhead era."""
    v0 = [e.versions.removed for e in engine.overheads if e.whole_prompt_profile and e.versions.removed]
    if not v0:
        return None
    before = [e for e in engine.defaults if version_tuple(e.since) < version_tuple(v0[-1])]
    if not before or len(before[-1].tiers) != 1:
        return None
    return _pair(before[-1].tiers[0], offline=False)
