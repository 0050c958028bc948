"""The estimator against numbers real vLLM runs printed in public issue threads.

Each point in realworld_numbers.yaml keeps the public thread (a GitHub issue or pull request, in two
cases a blog post with the full log) it came from. Weights per GPU must come within
3 % of "Model loading took" / "Loading model weights took"; given the KV memory vLLM logged, the pool
(tokens, or V0's "# GPU blocks") must come within 1 %, widened only by the rounding of the logged
GiB figure (two decimals hide up to 0.005 GiB). Points whose checkpoint is not in the catalog, or
whose logged KV line is one rank's view while the pool is the minimum over ranks, say so in `skip`.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.budget import GIB, estimate
from service.packs.catalog import Catalog
from service.packs.loader import load_yaml_file
from service.schemas import Budget, EstimateRequest

HERE = Path(__file__).resolve().parent
WEIGHT_TOLERANCE = 0.03
POOL_TOLERANCE = 0.01


class Point(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One vLLM start-up as a public thread logged it."""

    id: str
    url: str
    model: str
    gpu: str
    vllm_version: str
    tp: int = 1
    pp: int = 1
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int = 16
    weights_gib: float | None = None
    kv_gib: float | None = None
    kv_decimals: int = 2
    pool_tokens: int | None = None
    num_blocks: int | None = None
    max_model_len: int | None = None
    estimated_max_len: int | None = None
    skip_weights: str | None = None
    skip_pool: str | None = None
    note: str | None = None


class Points(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    points: list[Point]


POINTS = load_yaml_file(HERE / "realworld_numbers.yaml", Points).points


def _budget(
    point: Point, catalog: Catalog, kv_bytes: int | None = None, max_model_len: int | None = None
) -> Budget:
    request = EstimateRequest(
        model=point.model,
        gpu=point.gpu,
        gpus=point.tp * point.pp,
        tensor_parallel_size=point.tp,
        pipeline_parallel_size=point.pp,
        dtype=point.dtype,
        quantization=point.quantization,
        kv_cache_dtype=point.kv_cache_dtype,
        block_size=point.block_size,
        kv_cache_memory_bytes=kv_bytes,
        max_model_len=max_model_len or point.block_size,
        vllm_version=point.vllm_version,
    )
    return estimate(request, catalog)


def _pool_band(point: Point, catalog: Catalog, blocks: bool) -> tuple[int, int]:
    """The estimate at the lowest and highest KV memory that the logged (rounded) GiB could stand for."""
    assert point.kv_gib is not None
    half = 0.5 * 10.0**-point.kv_decimals
    low = _budget(point, catalog, round((point.kv_gib - half) * GIB))
    high = _budget(point, catalog, round((point.kv_gib + half) * GIB))
    if blocks:
        return low.num_blocks, high.num_blocks
    return low.kv_cache_tokens, high.kv_cache_tokens


def _ids(kind: str) -> list[Point]:
    if kind == "weights":
        return [p for p in POINTS if p.weights_gib is not None]
    if kind == "max_len":
        return [p for p in POINTS if p.estimated_max_len is not None]
    return [p for p in POINTS if p.kv_gib is not None and (p.pool_tokens or p.num_blocks)]


def test_every_point_is_unique_and_names_its_public_source() -> None:
    assert len({p.id for p in POINTS}) == len(POINTS)
    assert all(p.url.startswith("https://") for p in POINTS)


@pytest.mark.parametrize("point", _ids("weights"), ids=lambda p: p.id)
def test_weights_per_gpu_are_within_three_percent_of_the_logged_figure(
    point: Point, catalog: Catalog
) -> None:
    if point.skip_weights:
        pytest.skip(point.skip_weights)
    assert point.weights_gib is not None
    estimated = _budget(point, catalog).weights_gib
    assert estimated == pytest.approx(point.weights_gib, rel=WEIGHT_TOLERANCE), (estimated, point.weights_gib)


@pytest.mark.parametrize("point", _ids("pool"), ids=lambda p: p.id)
def test_pool_from_the_logged_kv_memory_is_within_one_percent(point: Point, catalog: Catalog) -> None:
    if point.skip_pool:
        pytest.skip(point.skip_pool)
    logged = point.num_blocks if point.num_blocks is not None else point.pool_tokens
    assert logged is not None
    low, high = _pool_band(point, catalog, blocks=point.num_blocks is not None)
    assert low * (1 - POOL_TOLERANCE) <= logged <= high * (1 + POOL_TOLERANCE), (low, high, logged)


@pytest.mark.parametrize("point", _ids("max_len"), ids=lambda p: p.id)
def test_estimated_maximum_model_length_from_the_logged_kv_memory_is_within_one_percent(
    point: Point, catalog: Catalog
) -> None:
    """vLLM's capacity-check search, replayed at the KV memory its error message states."""
    assert point.kv_gib is not None and point.estimated_max_len is not None
    half = 0.5 * 10.0**-point.kv_decimals
    low, high = (
        _budget(point, catalog, round((point.kv_gib + d) * GIB), point.max_model_len).max_model_len_fit
        for d in (-half, half)
    )
    logged = point.estimated_max_len
    assert low * (1 - POOL_TOLERANCE) <= logged <= high * (1 + POOL_TOLERANCE), (low, high, logged)
