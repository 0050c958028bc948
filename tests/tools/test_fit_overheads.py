"""tools/fit_overheads.py: the catalog's overhead coefficients are what the fit gives on the dataset,
so the logged runs and the numbers the estimator multiplies cannot drift apart."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from service.budget import GIB, OverheadInputs, OverheadTerms
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


def _synthetic(catalog: Catalog, forward: float, sampler: float) -> list[Any]:
    """Runs whose activation is exactly max(forward x elements, sampler x rows x vocab): three of
    them bound by the forward pass at distinct sizes, three by the sampler warm-up."""
    era = catalog.engine.overheads[-1]
    made = []
    for tokens_width, rows_vocab in (
        (4e8, 1e7),
        (6e8, 1e7),
        (9e8, 2e7),
        (5e7, 1.5e8),
        (6e7, 2e8),
        (4e7, 2.6e8),
    ):
        terms = OverheadTerms(
            activation=(tokens_width, 0.0, rows_vocab), non_torch=(1.0, 0.0), cuda_graph=(0.0, 0.0)
        )
        inputs = OverheadInputs(era=era, terms=terms, requested=0, weights=0, graph_in_budget=False)
        target = max(forward * tokens_width, sampler * rows_vocab) / GIB
        made.append(
            fit.Sample(point=None, inputs=inputs, targets={"activation": target}, weights_estimated=0.0)
        )
    return made


def test_the_activation_fit_finds_which_runs_each_branch_binds(catalog: Catalog) -> None:
    """The split of the runs between the forward pass and the sampler warm-up is searched, not
    grown from a starting guess: a sampler far from the pre-fit constant is still recovered."""
    coefficients = fit._fit_activation(_synthetic(catalog, 6.5, 38.0))
    assert coefficients == pytest.approx([6.5, 6.5, 38.0], rel=1e-6)


def test_a_forward_pass_logged_at_one_size_keeps_its_pre_fit_rate(catalog: Catalog) -> None:
    """One configuration logged twice cannot tell the forward pass's rate from the sampler's."""
    runs = _synthetic(catalog, 9.0, 15.0)
    one_size = [runs[0], runs[0], *runs[3:]]
    coefficients = fit._fit_activation(one_size)
    assert coefficients[:2] == [fit.INITIAL_ACTIVATION[0]] * 2
    assert coefficients[2] == pytest.approx(15.0, rel=1e-6)


def test_an_era_without_sampler_runs_keeps_the_bytes_its_source_counts(catalog: Catalog) -> None:
    """Held out, the 0.17+ era has no run of its own: its sampler warm-up is the catalog's count from
    vLLM's source, not the sorting sampler of the era before."""
    data = fit.samples(fit.load_points(), catalog)
    counted = catalog.engine.overheads[-1].sampler_source_bytes
    assert counted is not None
    without = fit.fit([s for s in data if s.era != catalog.engine.overheads[-1].versions], catalog)
    assert without[-1].activation.runs == 0
    assert without[-1].activation.coefficients[2] == counted
    assert without[-2].activation.coefficients[2] > 2 * counted
