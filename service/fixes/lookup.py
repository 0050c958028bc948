"""The fixes' view of the budget's catalog: what a GPU supports, a model's heads and checkpoints,
and a re-run of the budget with one input changed, so a fix's number is checked by the budget's
own arithmetic rather than a second copy of it.
"""

from __future__ import annotations

import msgspec

from service.budget import estimate, find_gpu, find_model, find_quantization, valid_tensor_parallel_sizes
from service.errors import InputError
from service.packs.catalog import Catalog as BudgetCatalog
from service.packs.catalog import ModelSpec
from service.packs.derived import per_pack
from service.schemas import Budget, EstimateRequest

__all__ = ["CatalogLookup"]

_LINEAR_ROPE = ("linear", "dynamic")

# the catalog each lookup serves is kept beside it, so an id is never reused while it is cached
_MAX_REMEMBERED = 1024


class CatalogLookup:
    """Implements `service.fixes.context.Catalog` over the budget's loaded catalog."""

    def __init__(self, catalog: BudgetCatalog) -> None:
        self._catalog = catalog
        # answers that depend only on the catalog, kept for the catalog's lifetime (see `for_catalog`)
        self._tp_sizes: dict[tuple[str, str | None], tuple[list[int] | None]] = {}

    @classmethod
    def for_catalog(cls, catalog: BudgetCatalog) -> CatalogLookup:
        """The one lookup of a loaded catalog: what it derives is computed once per catalog, not per
        diagnosis (a catalog is immutable; a service holds one, tests load a few)."""
        return _lookup_of(catalog)

    def _model(self, model: str) -> ModelSpec | None:
        try:
            return find_model(self._catalog, model)[0]
        except InputError:
            return None

    def gpu_supports_fp8(self, gpu: str) -> bool | None:
        try:
            spec = find_gpu(self._catalog, gpu, None).spec
        except InputError:
            return None
        return spec.fp8 if spec is not None else None

    def gpu_compute_capability(self, gpu: str) -> str | None:
        try:
            spec = find_gpu(self._catalog, gpu, None).spec
        except InputError:
            return None
        return spec.capability_text if spec is not None else None

    def attention_heads(self, model: str) -> int | None:
        spec = self._model(model)
        return spec.num_attention_heads if spec is not None else None

    def max_context(self, model: str) -> int | None:
        spec = self._model(model)
        if spec is None:
            return None
        rope = spec.rope
        if rope is not None and rope.type in _LINEAR_ROPE and not spec.family.startswith("gemma3"):
            return int(spec.max_position_embeddings * rope.factor)
        return spec.max_position_embeddings

    def gpus_with_memory(self, min_total_gib: float) -> list[tuple[str, float]]:
        fitting = [
            (g.id, g.total_gib)
            for g in self._catalog.gpus.gpus
            # a CUDA run moves to another CUDA card; other vendors need another vLLM build
            if g.total_gib >= min_total_gib and not g.unified_memory and g.vendor == "nvidia"
        ]
        return sorted(fitting, key=lambda g: (g[1], g[0]))

    def checkpoints(self, model: str) -> list[tuple[str, str]]:
        spec = self._model(model)
        if spec is None:
            return []
        return [(c.id, c.quantization.method) for c in self._catalog.models.checkpoints if c.base == spec.id]

    def tensor_parallel_sizes(self, model: str, quantization: str | None = None) -> list[int] | None:
        key = (model, quantization)
        known = self._tp_sizes.get(key)
        if known is None:
            known = (self._tensor_parallel_sizes(model, quantization),)
            if len(self._tp_sizes) >= _MAX_REMEMBERED:  # names come from logs: keep the memo bounded
                self._tp_sizes.clear()
            self._tp_sizes[key] = known
        return None if known[0] is None else list(known[0])

    def _tensor_parallel_sizes(self, model: str, quantization: str | None) -> list[int] | None:
        try:
            spec, checkpoint = find_model(self._catalog, model)
            method = quantization or (checkpoint.method if checkpoint is not None else None)
            quant = find_quantization(self._catalog, method) if method else None
        except InputError:
            return None
        scope = checkpoint.scope if checkpoint is not None else "linear"
        return valid_tensor_parallel_sizes(spec, self._catalog.engine, quant, scope)

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
        tp = tensor_parallel_size or budget.tensor_parallel_size
        request = EstimateRequest(
            model=model or budget.model,
            gpu=budget.gpu,
            gpu_total_gib=budget.total_gib,
            gpus=max(budget.gpus, tp * budget.pipeline_parallel_size * budget.data_parallel_size),
            dtype=budget.dtype,
            quantization=quantization or (None if model else budget.quantization),
            kv_cache_dtype=kv_cache_dtype or budget.kv_cache_dtype,
            max_model_len=max_model_len or budget.max_model_len,
            gpu_memory_utilization=gpu_memory_utilization or budget.gpu_memory_utilization,
            block_size=budget.block_size,
            tensor_parallel_size=tp,
            pipeline_parallel_size=budget.pipeline_parallel_size,
            data_parallel_size=budget.data_parallel_size,
            enable_expert_parallel=budget.expert_parallel_size > 1 or None,
            free_gib=budget.startup_check.free_gib,
            vllm_version=budget.vllm_version,
        )
        for attempt in (request, msgspec.structs.replace(request, gpu=None)):
            try:
                return estimate(attempt, self._catalog)
            except InputError:
                continue
        return None


@per_pack()
def _lookup_of(catalog: BudgetCatalog) -> CatalogLookup:
    return CatalogLookup(catalog)
