"""The estimator against numbers real vLLM runs printed in public issue threads.

Each point in realworld_numbers.yaml keeps the public thread (a GitHub issue or pull request, in two
cases a blog post with the full log) it came from. Weights per GPU must come within
3 % of "Model loading took" / "Loading model weights took"; given the KV memory vLLM logged, the pool
(tokens, or V0's "# GPU blocks") must come within 1 %, widened only by the rounding of the logged
GiB figure (two decimals hide up to 0.005 GiB). Points whose checkpoint is not in the catalog
(`model_in_catalog: false`) are sized from the checked-in config.json their `config` names, as a
pasted config would be, or wait for one; points whose logged KV line is one rank's view
while the pool is the minimum over ranks say so in `skip_pool`. The data itself is checked in
test_profiles_data.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.budget import GIB, estimate
from service.packs.catalog import Catalog
from service.schemas import Budget, EstimateRequest, SpeculativeConfig

from .profiles import Point, load_points

CONFIGS = Path(__file__).resolve().parents[1] / "models" / "configs"

WEIGHT_TOLERANCE = 0.03
POOL_TOLERANCE = 0.01


POINTS = load_points()


def _budget(
    point: Point, catalog: Catalog, kv_bytes: int | None = None, max_model_len: int | None = None
) -> Budget:
    config = None
    if point.config is not None:
        config = json.loads((CONFIGS / f"{point.config.replace('/', '--')}.json").read_text())
    speculative = None
    if point.num_speculative_tokens is not None:
        speculative = SpeculativeConfig(
            method=point.speculative_method, num_speculative_tokens=point.num_speculative_tokens
        )
    request = EstimateRequest(
        model=point.model,
        config=config,
        enable_prefix_caching=point.enable_prefix_caching,
        speculative_config=speculative,
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
    # since 0.21 the logged pool is concurrency × max_model_len, which a hybrid's state pages change
    low = _budget(point, catalog, round((point.kv_gib - half) * GIB), point.max_model_len)
    high = _budget(point, catalog, round((point.kv_gib + half) * GIB), point.max_model_len)
    if blocks:
        return low.num_blocks, high.num_blocks
    return low.kv_cache_tokens, high.kv_cache_tokens


def _ids(kind: str) -> list[Point]:
    """Points with the logged figure the test compares, on a model the catalog or its config resolves."""
    known = [p for p in POINTS if p.model_in_catalog or p.config is not None]
    if kind == "weights":
        return [p for p in known if p.weights_gib is not None]
    if kind == "max_len":
        return [p for p in known if p.estimated_max_len is not None]
    return [p for p in known if p.kv_gib is not None and (p.pool_tokens or p.num_blocks)]


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
    if point.skip_pool:
        pytest.skip(point.skip_pool)
    assert point.kv_gib is not None and point.estimated_max_len is not None
    half = 0.5 * 10.0**-point.kv_decimals
    low, high = (
        _budget(point, catalog, round((point.kv_gib + d) * GIB), point.max_model_len).max_model_len_fit
        for d in (-half, half)
    )
    logged = point.estimated_max_len
    assert low * (1 - POOL_TOLERANCE) <= logged <= high * (1 + POOL_TOLERANCE), (low, high, logged)
