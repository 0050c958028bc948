"""tools/fit_overheads.py: the catalog's overhead coefficients are what the fit gives on the dataset,
so the logged runs and the numbers the estimator multiplies cannot drift apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from service.packs.catalog import Catalog, OverheadEra, load_catalog

REPO = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fit_overheads", REPO / "tools" / "fit_overheads.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_overheads"] = module
    spec.loader.exec_module(module)
    return module


fit = _tool()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(REPO / "rules")


@pytest.fixture(scope="module")
def refitted(catalog: Catalog) -> list[OverheadEra]:
    return list(fit.fit(fit.samples(fit.load_points(), catalog), catalog))


def test_the_catalog_holds_the_coefficients_the_dataset_gives(
    catalog: Catalog, refitted: list[OverheadEra]
) -> None:
    """Rerun `python tools/fit_overheads.py --write` after editing realworld_numbers.yaml."""
    assert fit.eras_yaml(refitted) == fit.eras_yaml(catalog.engine.overheads)


def test_every_era_stands_on_logged_runs_and_states_its_spread(refitted: list[OverheadEra]) -> None:
    assert any(era.kv_runs > 0 for era in refitted)
    for era in refitted:
        assert era.kv_spread_gib > 0 and era.activation.spread_gib > 0 and era.non_torch.spread_gib > 0


def test_nonnegative_least_squares_recovers_an_exact_line_and_drops_a_negative_term() -> None:
    rows = [(1.0, 2.0), (1.0, 4.0), (1.0, 8.0)]
    assert fit.nonnegative_least_squares(rows, [3.0, 5.0, 9.0]) == pytest.approx([1.0, 1.0])
    # y falls with the second term: a negative slope is refused and the base takes the mean
    assert fit.nonnegative_least_squares(rows, [9.0, 5.0, 1.0]) == pytest.approx([5.0, 0.0])


def test_a_thread_held_out_is_predicted_by_a_fit_without_it(catalog: Catalog) -> None:
    data = fit.samples(fit.load_points(), catalog)
    thread = "llm-d/llm-d-benchmark"
    without = fit.fit([s for s in data if s.point.thread != thread], catalog)
    full = fit.fit(data, catalog)
    assert fit.eras_yaml(without) != fit.eras_yaml(full)
    score = fit.leave_one_thread_out(data, catalog)
    assert 0 < score.runs == sum(1 for s in data if fit.kv_scored(s))


def test_each_thread_miss_is_listed_once_with_its_terms(catalog: Catalog) -> None:
    data = fit.samples(fit.load_points(), catalog)
    score = fit.leave_one_thread_out(data, catalog)
    misses = fit.thread_misses(data, catalog)
    assert len(misses) == score.runs - score.within
    assert all("activation" in line and "non_torch" in line and "held out" in line for line in misses)
