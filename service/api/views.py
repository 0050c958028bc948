"""What the read-only endpoints answer, and the per-worker state the lifespan loads once.

Catalog listings and pack counts are computed when the packs load, so `/v1/models`, `/v1/gpus` and
`/v1/rules` return ready values.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import anyio
import msgspec
from litestar.datastructures import State

from service.api.hits import HitIndex
from service.api.settings import Settings
from service.api.stores import SharedState
from service.calibration_store import CalibrationStore
from service.models.chain import ModelResolver, ModelSettings
from service.packs import RulePacks
from service.team_memory import TeamMemory

__all__ = [
    "GpuEntry",
    "Health",
    "Loaded",
    "ModelInfo",
    "PackSummary",
    "Readiness",
    "RulesInfo",
    "loaded",
]


class Health(msgspec.Struct, frozen=True):
    status: str


class Readiness(msgspec.Struct, frozen=True):
    status: str
    rules_version: str
    redis: str


class PackSummary(msgspec.Struct, frozen=True):
    signature_packs: list[str]
    signature_rules: int
    models: int
    checkpoints: int
    gpus: int
    fix_recipes: int
    flags: int


class RulesInfo(msgspec.Struct, frozen=True):
    rules_version: str
    packs: PackSummary


class ModelInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    hf_id: str | None
    family: str | None
    aliases: list[str]
    max_position_embeddings: int | None = None
    quantization: str | None = None
    base: str | None = None


class GpuEntry(msgspec.Struct, frozen=True):
    id: str
    total_gib: float
    compute_capability: str | None
    aliases: list[str]
    vendor: str = "nvidia"
    arch: str | None = None
    unified_memory: bool = False


LARGE_LOGS_AT_ONCE = 2


@dataclass(frozen=True, slots=True)
class Loaded:
    """Everything a worker loads at startup; read-only afterwards."""

    settings: Settings
    packs: RulePacks
    shared: SharedState
    models: list[ModelInfo]
    gpus: list[GpuEntry]
    rules: RulesInfo
    # the service reads no paths of its own disk that a request names; only the HF cache and the Hub
    resolver: ModelResolver = field(
        default_factory=lambda: ModelResolver(ModelSettings.from_env(local_paths=False))
    )
    # Wall-clock seconds for the rate limiter's windows; tests inject one instead of sleeping.
    clock: Callable[[], float] = field(default=time.time)
    # the bot's team memory in the shared Redis (None without Redis): what /v1/fingerprints lists
    memory: TeamMemory | None = None
    # the estimator's error on pasted profiles, in the same Redis (None without Redis)
    calibration: CalibrationStore | None = None
    # Large logs diagnosed at once by this worker: the work is CPU-bound under the GIL, so more threads
    # only hold more 2 MB documents in memory at the same time (issue 14: memory after a burst).
    large_logs: anyio.CapacityLimiter = field(
        default_factory=lambda: anyio.CapacityLimiter(LARGE_LOGS_AT_ONCE)
    )
    # raw requests answered so far and the query strings accepted: a repeat is a hit before parsing
    hits: HitIndex = field(default_factory=lambda: HitIndex(4096))

    @classmethod
    def build(
        cls,
        settings: Settings,
        packs: RulePacks,
        shared: SharedState,
        clock: Callable[[], float] = time.time,
        *,
        memory: TeamMemory | None = None,
        calibration: CalibrationStore | None = None,
    ) -> Loaded:
        models, gpus, rules = _catalog_views(packs)
        return cls(
            settings,
            packs,
            shared,
            models,
            gpus,
            rules,
            clock=clock,
            memory=memory,
            calibration=calibration,
            hits=HitIndex(settings.cache_max_entries),
        )


def loaded(state: State) -> Loaded:
    """The worker's Loaded record (set by the lifespan before the first request)."""
    return cast(Loaded, state.loaded)


def _catalog_views(packs: RulePacks) -> tuple[list[ModelInfo], list[GpuEntry], RulesInfo]:
    catalog = packs.catalog
    model_list = [
        ModelInfo(
            m.id,
            m.hf_id,
            m.family,
            list(m.aliases),
            m.max_position_embeddings,
            m.quantization.method if m.quantization else None,
        )
        for m in catalog.models.models
    ] + [
        ModelInfo(c.id, None, None, list(c.aliases), quantization=c.quantization.method, base=c.base)
        for c in catalog.models.checkpoints
    ]
    gpu_list = [
        GpuEntry(g.id, g.total_gib, g.capability_text, list(g.aliases), g.vendor, g.arch, g.unified_memory)
        for g in catalog.gpus.gpus
    ]
    summary = PackSummary(
        signature_packs=list(packs.signatures.packs),
        signature_rules=len(packs.signatures.rules),
        models=len(catalog.models.models),
        checkpoints=len(catalog.models.checkpoints),
        gpus=len(gpu_list),
        fix_recipes=len(packs.fixes.recipes),
        flags=len(packs.fixes.flags),
    )
    return model_list, gpu_list, RulesInfo(rules_version=packs.digest, packs=summary)
