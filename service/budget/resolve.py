"""Turning what a person typed (a model id, a GPU name) into catalog records.

Lookups ignore case and punctuation, accept Hugging Face ids, catalog ids and aliases, and fail with
the closest catalog names (difflib) so the person can correct a typo in one step.
"""

from __future__ import annotations

import bisect
import difflib
import re
from typing import Protocol, TypeVar

import msgspec

from service.budget.gguf import base_model_names, find_file_type, is_gguf_reference
from service.errors import InvalidConfigError, UnknownGpuError, UnknownModelError
from service.first_use import first_use_re
from service.packs.catalog import (
    Catalog,
    GpuSpec,
    KvDtypeSpec,
    ModelSpec,
    QuantMethodSpec,
    QuantSpec,
    fold_name,
    gpu_short_name,
    spaced_name,
)
from service.packs.derived import per_pack

__all__ = [
    "other_sizes",
    "ResolvedGpu",
    "find_gpu",
    "find_kv_dtype",
    "find_model",
    "in_catalog",
    "find_quantization",
]

_GIB = first_use_re(r"^\s*(\d+(?:\.\d+)?)\s*(?:gib|gb|g)?\s*$", re.IGNORECASE)


def _closest(name: str, candidates: list[str]) -> list[str]:
    folded = {fold_name(c): c for c in candidates}
    tail = fold_name(name.rsplit("/", 1)[-1])
    hits = difflib.get_close_matches(tail, list(folded), n=3, cutoff=0.5)
    return [folded[h] for h in hits]


def _model_hit(catalog: Catalog, name: str) -> tuple[ModelSpec, QuantSpec | None] | None:
    index = catalog.index
    key = name.strip().rstrip("/")
    hit = index.models.get(fold_name(key)) or index.models.get(fold_name(key.rsplit("/", 1)[-1]))
    if hit is not None or not is_gguf_reference(key):
        return hit
    # a GGUF file or repo holds the model its stem names (its weights are the file's own types)
    for base in base_model_names(key, find_file_type(catalog, key)):
        if (found := index.models.get(fold_name(base))) is not None:
            return found[0], None
    return None


def find_model(catalog: Catalog, name: str) -> tuple[ModelSpec, QuantSpec | None]:
    """The architecture and checkpoint quantization for a catalog id, Hugging Face id or alias."""
    hit = _model_hit(catalog, name)
    if hit is None:
        raise UnknownModelError(name, lambda: _closest(name.strip().rstrip("/"), catalog.index.model_names))
    return hit


def in_catalog(catalog: Catalog, name: str) -> bool:
    """Whether `find_model` knows the name (without computing the closest names of a miss)."""
    return _model_hit(catalog, name) is not None


class ResolvedGpu(msgspec.Struct, frozen=True):
    """The GPU as the budget needs it; `spec` is None when only a memory size was given."""

    name: str
    total_gib: float
    spec: GpuSpec | None


def find_gpu(catalog: Catalog, name: str | None, total_gib: float | None) -> ResolvedGpu:
    """A catalog GPU by name or NVML name, or an anonymous GPU of `total_gib` (also "80", "80GiB")."""
    spec: GpuSpec | None = None
    if name:
        gpus = catalog.index.gpus
        spec = gpus.get(fold_name(name)) or gpus.get(fold_name(gpu_short_name(name)))
        if spec is None:
            size = _GIB.match(name)
            if size is None:
                raise UnknownGpuError(name, lambda: _closest(name, catalog.index.gpu_names))
            total_gib = total_gib if total_gib is not None else float(size.group(1))
    if total_gib is not None:
        if not 0 < total_gib <= 4096:
            raise InvalidConfigError(f"A GPU with {total_gib} GiB of memory is not plausible.")
        return ResolvedGpu(spec.id if spec else f"{total_gib:g} GiB GPU", total_gib, spec)
    if spec is None:
        raise InvalidConfigError(
            "Name a GPU (e.g. H100, A100-80GB, RTX 4090) or give its total memory in GiB."
        )
    return ResolvedGpu(spec.id, spec.total_gib, spec)


def _abbreviates(short: str, full: str) -> bool:
    return full.startswith(short) and not full[len(short) : len(short) + 1].isdigit()


def other_sizes(catalog: Catalog, name: str, chosen: GpuSpec) -> list[str]:
    """Catalog GPUs of another memory size that `name` also abbreviates ("A100" → the 40 GB cards)."""
    typed = gpu_short_name(name)
    folded, spaced = _sorted_spellings(catalog)
    # "A100" abbreviates "A100-PCIE-40GB" and "RTX 4060 Ti" "RTX-4060-Ti-8GB", but "A10" does not
    # abbreviate "A100": a digit follows the typed name with no separator between
    variants = _abbreviated(folded, fold_name(typed)) | _abbreviated(spaced, spaced_name(typed))
    return [
        gpu.id
        for number, gpu in enumerate(catalog.index.gpu_spellings)
        if number in variants and abs(gpu.total_gib - chosen.total_gib) > 1
    ]


_Spellings = list[tuple[str, int]]


@per_pack()
def _sorted_spellings(catalog: Catalog) -> tuple[_Spellings, _Spellings]:
    """Every GPU's folded and spaced spellings, sorted, with the GPU's position in the catalog: the
    spellings a typed name starts are then one run found by bisection, not a pass over all of them
    (an estimate compared some 1,400 spellings per call)."""
    gpus = catalog.index.gpu_spellings
    folded = sorted((full, number) for number, gpu in enumerate(gpus) for full in gpu.folded)
    spaced = sorted((full, number) for number, gpu in enumerate(gpus) for full in gpu.spaced)
    return folded, spaced


def _abbreviated(spellings: _Spellings, short: str) -> set[int]:
    found: set[int] = set()
    for at in range(bisect.bisect_left(spellings, (short,)), len(spellings)):
        full, number = spellings[at]
        if not full.startswith(short):
            break
        if _abbreviates(short, full):
            found.add(number)
    return found


class _Named(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def aliases(self) -> list[str]: ...


_N = TypeVar("_N", bound=_Named)


def _by_name(entries: list[_N], name: str, what: str) -> _N:
    folded = fold_name(name)
    for entry in entries:
        if folded in {fold_name(entry.id), *(fold_name(a) for a in entry.aliases)}:
            return entry
    known = ", ".join(e.id for e in entries)
    raise InvalidConfigError(f"The {what} {name!r} is not in the catalog (known: {known}).")


def find_quantization(catalog: Catalog, name: str) -> QuantMethodSpec:
    """A quantization method by id or by the `--quantization` value vLLM accepts."""
    return _by_name(catalog.dtypes.quantization, name, "quantization method")


def find_kv_dtype(catalog: Catalog, name: str) -> KvDtypeSpec:
    """A `--kv-cache-dtype` value by id or alias."""
    return _by_name(catalog.dtypes.kv_cache_dtypes, name, "KV-cache dtype")
