"""The real-run dataset is what its sources printed: numbers in excerpts, units GiB, ids unique.

Every logged figure of a point must appear in its `excerpt` as printed (a GiB figure followed by
"GiB" or V0's "GB", which vLLM computes with 2**30 as well); every input a point states (lengths,
utilization, sequences) must appear in the excerpt too, unless `inferred` says how it was derived.
The catalog flag says truthfully whether the estimator can resolve the model today.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import msgspec
import pytest

from service.budget.resolve import find_model
from service.errors import UnknownModelError
from service.packs.catalog import Catalog

from .profiles import LOGGED_COUNTS, LOGGED_GIB, STATED_INPUTS, Point, load_points

POINTS = load_points()
WITH_EXCERPT = [p for p in POINTS if p.excerpt is not None]
FIELDS = {f.name for f in msgspec.structs.fields(Point)}
VERSION = re.compile(r"^\d+\.\d+\.\d+(?:\.\d+|\.post\d+)?$")


def _decimal_pattern(value: float) -> str:
    """A printed decimal of `value`: '0.9' also matches '0.90', '14.96' does not match '114.96'."""
    text = repr(value)
    if "e" in text:
        text = f"{value:.10f}".rstrip("0")
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0")
    body = re.escape(whole) + (r"\." + re.escape(frac) + "0*" if frac else r"(?:\.0+)?")
    return rf"(?<![\d.]){body}(?![\d])"


def _int_pattern(value: int) -> str:
    """An integer as vLLM prints it, with or without thousands separators."""
    return rf"(?<![\d.,])(?:{value}|{value:,})(?![\d])"


def _gib_in(excerpt: str, value: float) -> bool:
    """The figure followed by its unit, anywhere in a quoted table whose header says "(GiB)", or as
    the value of a record's field whose name carries the unit (`"weight_memory_gib": 27.52`)."""
    unit = r"\s*(?:GiB|GB)\b" if "(GiB)" not in excerpt else ""
    if re.search(_decimal_pattern(value) + unit, excerpt) is not None:
        return True
    return re.search(r"_gib\"?\s*[:=]\s*" + _decimal_pattern(value), excerpt) is not None


def test_threads_group_one_discussion_or_repository() -> None:
    """Leave-one-thread-out needs the grouping: comments of one issue, files of one repository."""
    by_thread = {p.thread for p in POINTS}
    assert "vllm-project/vllm#10517" in by_thread and "llm-d/llm-d-benchmark" in by_thread
    assert len(by_thread) < len(POINTS)


def test_ids_are_unique() -> None:
    ids = [p.id for p in POINTS]
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.id)
def test_point_is_well_formed(point: Point) -> None:
    parts = urlsplit(point.url)
    assert parts.scheme == "https" and parts.netloc and " " not in point.url, point.url
    if point.vllm_version is None:
        assert "vllm_version" in point.inferred, "an unknown version says which releases it can be"
    else:
        assert VERSION.match(point.vllm_version), point.vllm_version
    assert point.tp >= 1 and point.pp >= 1 and point.block_size in (1, 8, 16, 32, 64, 128, 256)
    assert set(point.inferred) <= FIELDS, set(point.inferred) - FIELDS
    if point.gpu_memory_utilization is not None:
        assert 0 < point.gpu_memory_utilization <= 1
    figures = [getattr(point, name) for name in LOGGED_GIB]
    assert any(f is not None for f in figures) or point.pool_tokens or point.num_blocks


@pytest.mark.parametrize("point", WITH_EXCERPT, ids=lambda p: p.id)
def test_every_logged_figure_is_in_the_excerpt_with_its_unit(point: Point) -> None:
    assert point.excerpt is not None
    for name in LOGGED_GIB:
        value = getattr(point, name)
        if value is not None and name not in point.inferred:
            assert _gib_in(point.excerpt, value), (name, value)
    for name in LOGGED_COUNTS:
        value = getattr(point, name)
        if value is not None and name not in point.inferred:
            assert re.search(_int_pattern(value), point.excerpt), (name, value)


@pytest.mark.parametrize("point", WITH_EXCERPT, ids=lambda p: p.id)
def test_every_stated_input_is_in_the_excerpt(point: Point) -> None:
    assert point.excerpt is not None
    for name in STATED_INPUTS:
        value = getattr(point, name)
        if value is None or name in point.inferred:
            continue
        pattern = _decimal_pattern(value) if isinstance(value, float) else _int_pattern(value)
        assert re.search(pattern, point.excerpt), (name, value)
    if point.tp > 1 and "tp" not in point.inferred:
        assert re.search(_TP_STATED.format(tp=point.tp), point.excerpt), point.tp


# "--tensor-parallel-size 4", "tensor_parallel_size=4", "-tp 2", "TP=2", "4xH100"
_TP_STATED = r"(?:tensor[_-]parallel(?:[_-]size)?\W{{0,3}}|-tp\s*|TP\s*=?\s*){tp}\b|\b{tp}\s*[x×]\s*[A-Z]"


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.id)
def test_the_catalog_flag_says_whether_the_model_resolves(point: Point, catalog: Catalog) -> None:
    try:
        find_model(catalog, point.model)
    except UnknownModelError:
        resolves = False
    else:
        resolves = True
    assert resolves == point.model_in_catalog, point.model
