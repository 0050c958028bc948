"""Fit vLLM's measured overheads per era to the logged runs, and score the estimator on held-out runs.

The runs are tests/budget/realworld_numbers.yaml; the eras and the terms each coefficient multiplies
are rules/catalog/engines.yaml `overheads:` and service/budget/overheads.py. For each era and each
overhead (activation peak, non-torch memory, CUDA graphs) the coefficients are the non-negative
least-squares fit to the runs that logged that figure; an era with too few such runs keeps the era
before's fit (`runs: 0`). The spreads are the fits' residual standard deviations; the KV
spread is that of the KV memory the fitted overheads predict against the logged one.

Leave-one-thread-out: each discussion's runs (`Point.thread`: an issue or pull request; the files a
repository commits count as one campaign) are predicted by a fit to every other discussion's runs;
leave-one-source-out holds out one URL (without its anchor) at a time. The tool prints the share
of held-out runs whose predicted KV memory is within max(0.5 GiB, 10 %) of the logged figure, and
of weights within 3 %.

    python tools/fit_overheads.py              # the fit, its scores, and the `overheads:` YAML
    python tools/fit_overheads.py --write      # also rewrite engines.yaml's `overheads:` block
    python tools/fit_overheads.py --as-is      # score the catalog's coefficients without refitting
    python tools/fit_overheads.py --misses     # also each leave-one-thread-out miss, term by term

Plain Python, not numpy: the systems are at most 3 x 3 and numpy is not a dependency of the project.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "budget"))

from profiles import Point, load_points  # noqa: E402

from service.budget import (  # noqa: E402
    GIB,
    OverheadInputs,
    activation_bytes,
    component_bytes,
    estimate,
    overhead_inputs,
)
from service.errors import InputError  # noqa: E402
from service.packs.catalog import Catalog, OverheadEra, OverheadFit, load_catalog  # noqa: E402
from service.schemas import EstimateRequest  # noqa: E402
from service.versions import VersionRange  # noqa: E402

ENGINES = ROOT / "rules" / "catalog" / "engines.yaml"
COMPONENTS = ("activation", "non_torch", "cuda_graph")
KV_TOLERANCE_GIB, KV_TOLERANCE_SHARE, WEIGHT_TOLERANCE = 0.5, 0.10, 0.03
SIGNIFICANT = 4  # digits kept of each coefficient
# The pre-fit constants, bytes per element: the forward pass keeps about 6 bytes per MLP-width
# element (the fp16 gate_up output, 4, and its activation, 2) and per hidden element (about three
# fp16 hidden-sized buffers: residual, normed input, layer output), so one coefficient multiplies
# both (vllm#10517's V0 runs: 6.0 at 20k and at 29k tokens); fp32 logits in about three copies.
# Where an era has too few runs bound by the forward pass these values stand.
INITIAL_ACTIVATION = (6.0, 6.0, 12.0)


@dataclass(frozen=True)
class Sample:
    """One logged run as the fit sees it: the estimator's terms and the figures the log gave (GiB)."""

    point: Point
    inputs: OverheadInputs
    targets: dict[str, float]
    weights_estimated: float

    @property
    def era(self) -> VersionRange:
        return self.inputs.era.versions

    def terms(self, component: str) -> tuple[float, ...]:
        """The component's terms in GiB per coefficient (activation terms are elements: bytes / GIB)."""
        values: tuple[float, ...] = getattr(self.inputs.terms, component)
        return tuple(v / GIB for v in values) if component == "activation" else values


def request_of(point: Point) -> EstimateRequest:
    """The estimate request a logged run stands for: every input it states or names as inferred."""
    return EstimateRequest(
        model=point.model,
        gpu=point.gpu,
        gpu_total_gib=point.total_gpu_gib,
        gpus=point.tp * point.pp,
        tensor_parallel_size=point.tp,
        pipeline_parallel_size=point.pp,
        dtype=point.dtype,
        quantization=point.quantization,
        kv_cache_dtype=point.kv_cache_dtype,
        block_size=point.block_size,
        max_model_len=point.max_model_len,
        gpu_memory_utilization=point.gpu_memory_utilization,
        max_num_seqs=point.max_num_seqs,
        max_num_batched_tokens=point.max_num_batched_tokens,
        enforce_eager=point.enforce_eager,
        vllm_version=point.vllm_version,
    )


def _targets(point: Point, inputs: OverheadInputs) -> dict[str, float]:
    """The overheads the log states; a V0-style split without its activation line gives it as the
    remainder of usable memory after weights, non-torch memory and the KV cache."""
    found: dict[str, float] = {}
    if point.non_torch_gib is not None:
        found["non_torch"] = point.non_torch_gib
    graph = point.cudagraph_gib if point.cudagraph_gib is not None else point.graph_capture_gib
    if graph is not None and not point.enforce_eager:
        found["cuda_graph"] = graph
    derivable = "non_torch" in found and not inputs.graph_in_budget
    if point.activation_gib is not None:
        found["activation"] = point.activation_gib
    elif derivable and (usable := _usable(point)) is not None and point.weights_gib is not None:
        assert point.kv_gib is not None  # _usable needs it
        found["activation"] = usable - point.weights_gib - found["non_torch"] - point.kv_gib
    return found


def _usable(point: Point) -> float | None:
    """total x utilization, when the log states both and a KV figure to subtract from it."""
    if point.total_gpu_gib is None or point.gpu_memory_utilization is None or point.kv_gib is None:
        return None
    return point.total_gpu_gib * point.gpu_memory_utilization


def samples(points: Sequence[Point], catalog: Catalog) -> list[Sample]:
    """The runs whose model the estimator resolves, with their terms; others cannot be fitted."""
    found: list[Sample] = []
    for point in points:
        if not point.model_in_catalog:
            continue
        try:
            inputs = overhead_inputs(request_of(point), catalog, point.engine, point.chunked_prefill)
        except InputError:
            continue
        found.append(Sample(point, inputs, _targets(point, inputs), inputs.weights / GIB))
    return found


# --- least squares ---------------------------------------------------------------------------


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when the system is singular."""
    n = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][n] / a[i][i] for i in range(n)]


def nonnegative_least_squares(rows: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Least squares with every coefficient at least zero: refit without the most negative term
    until none is, and without terms that never vary from zero. Columns are scaled to unit size so
    the normal equations stay well conditioned when terms count tens of millions of elements."""
    k = len(rows[0])
    scale = [max((abs(r[j]) for r in rows), default=0.0) for j in range(k)]
    active = [j for j in range(k) if scale[j] > 0]
    while active:
        x = [[r[j] / scale[j] for j in active] for r in rows]
        normal = [[sum(row[i] * row[j] for row in x) for j in range(len(active))] for i in range(len(active))]
        right = [sum(row[i] * t for row, t in zip(x, y, strict=True)) for i in range(len(active))]
        solution = _solve(normal, right)
        if solution is None:
            active.pop()  # collinear terms: the last (most specific) one goes
            continue
        worst = min(range(len(active)), key=lambda i: solution[i])
        if solution[worst] >= 0:
            coefficients = [0.0] * k
            for j, c in zip(active, solution, strict=True):
                coefficients[j] = c / scale[j]
            return coefficients
        active.pop(worst)
    return [0.0] * k


def _significant(value: float) -> float:
    return 0.0 if value == 0 else round(value, SIGNIFICANT - 1 - math.floor(math.log10(abs(value))))


def _spread(residuals: Sequence[float], coefficients: Sequence[float]) -> float:
    """Residual standard deviation, with one degree of freedom per fitted (non-zero) coefficient."""
    free = max(1, len(residuals) - sum(1 for c in coefficients if c > 0))
    return round(math.sqrt(sum(e * e for e in residuals) / free), 3)


def _fit_activation(used: Sequence[Sample], sampler_default: float | None = None) -> list[float]:
    """The activation peak is the larger of the forward pass and the sampler warm-up, so each run
    is bound by one of them: by the sampler exactly when its ratio of forward-pass to sampler
    elements is below the ratio of the two coefficients. Every split of the runs at that ratio is
    tried (the runs with the lowest ratios sampler-bound), each branch fitted on its runs, and the
    split whose coefficients reproduce it with the least squared error is kept (where none does,
    the least squared error of any); a branch without
    runs keeps its pre-fit constant (for the sampler, the era's count from vLLM's source where the
    catalog states one). The forward pass has one coefficient for its two terms (bytes
    per MLP-width and per hidden element are alike; fitted apart the nearly collinear terms traded
    against each other, V0: 2.1 and 21.7 bytes), fitted only where its runs profile at least two
    sizes: one configuration logged twice (V1 profiles the same batch at any max_model_len) cannot
    tell the forward pass's rate from the sampler's."""
    rows = sorted(
        ((r[0] + r[1], r[2], s.targets["activation"]) for s in used for r in [s.terms("activation")]),
        key=lambda row: row[0] / row[1] if row[1] else math.inf,
    )
    best: tuple[tuple[bool, float], list[float]] | None = None
    for split in range(len(rows) + 1):
        sampler_rows, forward_rows = rows[:split], rows[split:]
        forward, _, sampler = INITIAL_ACTIVATION
        sampler = sampler_default or sampler
        if len({f for f, _, _ in forward_rows}) > 1:
            (forward,) = nonnegative_least_squares(
                [(f,) for f, _, _ in forward_rows], [t for *_, t in forward_rows]
            )
        if sampler_rows:
            (sampler,) = nonnegative_least_squares(
                [(z,) for _, z, _ in sampler_rows], [t for *_, t in sampler_rows]
            )
        # scored as the estimator applies them: each run takes the larger of the two branches;
        # a split whose coefficients would bind its runs otherwise ranks after every one that holds
        holds = all((sampler * z >= forward * f) == (k < split) for k, (f, z, _) in enumerate(rows))
        error = sum((t - max(forward * f, sampler * z)) ** 2 for f, z, t in rows)
        if best is None or (not holds, error) < best[0]:
            best = ((not holds, error), [forward, forward, sampler])
    assert best is not None  # range(len(rows) + 1) is never empty
    return best[1]


def _fit_component(
    rows: Sequence[Sample], component: str, sampler_default: float | None = None
) -> tuple[list[float], float, int]:
    """(coefficients, residual spread GiB, runs) of one overhead over `rows` that logged it."""
    used = [s for s in rows if component in s.targets]
    if not used:
        return [], 0.0, 0
    if component == "activation":
        raw = _fit_activation(used, sampler_default)
    else:
        raw = nonnegative_least_squares(
            [s.terms(component) for s in used], [s.targets[component] for s in used]
        )
    coefficients = [_significant(c) for c in raw]
    fitted = OverheadFit(coefficients=coefficients, spread_gib=0.0, runs=len(used))
    residuals = [s.targets[component] - component_gib(fitted, s, component) for s in used]
    return coefficients, _spread(residuals, coefficients), len(used)


def _enough(rows: Sequence[Sample], component: str, terms: int) -> bool:
    """Whether an era has more runs that logged the component than the component has terms."""
    return sum(1 for s in rows if component in s.targets) > terms


def fit(data: Sequence[Sample], catalog: Catalog) -> list[OverheadEra]:
    """The catalog's eras with coefficients and spreads fitted to `data`.

    An era with too few runs for an overhead keeps the era before's fit (vLLM's behaviour holds
    until a release changes it), except where the catalog counts what the release changed: the
    sampler warm-up's bytes per logits element (`sampler_source_bytes`) replace the era before's.
    The first era, lacking runs, takes the fit over all of them.
    """
    eras: list[OverheadEra] = []
    for era in catalog.engine.overheads:
        mine = [s for s in data if s.era == era.versions]
        fits: dict[str, OverheadFit] = {}
        for component in COMPONENTS:
            size = len(getattr(era, component).coefficients)
            counted = era.sampler_source_bytes if component == "activation" else None
            if _enough(mine, component, 1 if component == "activation" else size):
                coefficients, spread, runs = _fit_component(mine, component, counted)
                fits[component] = OverheadFit(coefficients=coefficients, spread_gib=spread, runs=runs)
            elif eras:
                carried: OverheadFit = getattr(eras[-1], component)
                kept = carried.coefficients if counted is None else [*carried.coefficients[:2], counted]
                fits[component] = OverheadFit(coefficients=kept, spread_gib=carried.spread_gib, runs=0)
            else:
                coefficients, spread, _ = _fit_component(data, component)
                fits[component] = OverheadFit(
                    coefficients=coefficients or [0.0] * size, spread_gib=spread, runs=0
                )
        eras.append(
            OverheadEra(
                versions=era.versions,
                whole_prompt_profile=era.whole_prompt_profile,
                sampler_source_bytes=era.sampler_source_bytes,
                kv_spread_gib=0.0,
                kv_runs=0,
                **fits,
            )
        )
    # the KV spread of each era, from the fitted eras' predictions of its runs
    errors = {
        era.versions: [kv_error(s, _era_of(eras, s)) for s in data if s.era == era.versions] for era in eras
    }
    pooled = [e for era_errors in errors.values() for e in era_errors if e is not None]
    finished: list[OverheadEra] = []
    for era in eras:
        mine_errors = [e for e in errors[era.versions] if e is not None]
        if len(mine_errors) > 1:
            spread, runs = _rms(mine_errors), len(mine_errors)
        else:
            spread, runs = (finished[-1].kv_spread_gib if finished else _rms(pooled)), 0
        finished.append(_replace_kv(era, spread, runs))
    return finished


def _rms(values: Sequence[float]) -> float:
    return round(math.sqrt(sum(v * v for v in values) / max(1, len(values))), 3)


def _replace_kv(era: OverheadEra, spread: float, runs: int) -> OverheadEra:
    return msgspec.structs.replace(era, kv_spread_gib=spread, kv_runs=runs)


def _era_of(eras: Sequence[OverheadEra], sample: Sample) -> OverheadEra:
    return next(e for e in eras if e.versions == sample.era)


# --- prediction and scores -------------------------------------------------------------------


def component_gib(fit_: OverheadFit, sample: Sample, component: str) -> float:
    """The estimator's own arithmetic (service/budget/overheads.py) for one overhead, in GiB."""
    if component == "activation":
        return activation_bytes(fit_, sample.inputs.terms.activation) / GIB
    return max(0, component_bytes(fit_, getattr(sample.inputs.terms, component))) / GIB


def _component(era: OverheadEra, sample: Sample, component: str) -> float:
    return component_gib(getattr(era, component), sample, component)


def predicted_kv(sample: Sample, era: OverheadEra) -> float:
    """KV memory (GiB) the era's overheads leave: requested - weights - activation - non-torch
    (- CUDA graphs where profiled into the budget)."""
    fixed = _component(era, sample, "activation") + _component(era, sample, "non_torch")
    if sample.inputs.graph_in_budget:
        fixed += _component(era, sample, "cuda_graph")
    return sample.inputs.requested / GIB - sample.weights_estimated - fixed


def kv_scored(sample: Sample) -> bool:
    """Whether a run states what its KV memory depends on (the logged figure and the utilization)
    and the figure is one GPU's, as the estimate is."""
    point = sample.point
    return point.kv_gib is not None and point.gpu_memory_utilization is not None and point.skip_kv is None


def kv_error(sample: Sample, era: OverheadEra) -> float | None:
    if not kv_scored(sample):
        return None
    assert sample.point.kv_gib is not None
    return predicted_kv(sample, era) - sample.point.kv_gib


def kv_within(sample: Sample, era: OverheadEra) -> bool:
    assert sample.point.kv_gib is not None
    logged = sample.point.kv_gib
    return abs(predicted_kv(sample, era) - logged) <= max(KV_TOLERANCE_GIB, KV_TOLERANCE_SHARE * abs(logged))


@dataclass(frozen=True)
class Score:
    """Held-out (or in-sample) runs whose KV memory the estimate gets within tolerance, and the
    mean absolute error in GiB."""

    within: int
    runs: int
    mean_abs_gib: float = 0.0

    @property
    def share(self) -> float:
        return self.within / self.runs if self.runs else 0.0

    def __str__(self) -> str:
        error = f", mean |error| {self.mean_abs_gib:.2f} GiB" if self.mean_abs_gib else ""
        return f"{self.within}/{self.runs} ({100 * self.share:.0f} %){error}"


def kv_score(data: Sequence[Sample], eras_for: Callable[[Sample], Sequence[OverheadEra]]) -> Score:
    scored = [s for s in data if kv_scored(s)]
    errors = [abs(kv_error(s, _era_of(eras_for(s), s)) or 0.0) for s in scored]
    within = sum(1 for s in scored if kv_within(s, _era_of(eras_for(s), s)))
    return Score(within, len(scored), round(sum(errors) / max(1, len(errors)), 2))


def leave_one_group_out(data: Sequence[Sample], catalog: Catalog, group: Callable[[Point], str]) -> Score:
    """KV within tolerance, each group's runs predicted by a fit without that group: `Point.thread`
    (an issue, or a repository's committed campaign) or `Point.source` (one URL)."""
    groups = {group(s.point) for s in data if kv_scored(s)}
    held_out = {g: fit([s for s in data if group(s.point) != g], catalog) for g in groups}
    return kv_score(data, lambda s: held_out[group(s.point)])


def leave_one_thread_out(data: Sequence[Sample], catalog: Catalog) -> Score:
    return leave_one_group_out(data, catalog, lambda p: p.thread)


def thread_misses(data: Sequence[Sample], catalog: Catalog) -> list[str]:
    """One line per run that leave-one-thread-out predicts outside tolerance: its era, the KV
    memory logged and predicted held out, and each overhead as logged, fitted held out and fitted
    with the run, so the term (and era) that carries the error can be read off."""
    scored = [s for s in data if kv_scored(s)]
    held_out = {
        t: fit([s for s in data if s.point.thread != t], catalog) for t in {s.point.thread for s in scored}
    }
    everything = fit(data, catalog)
    lines: list[str] = []
    for sample in scored:
        era = _era_of(held_out[sample.point.thread], sample)
        if kv_within(sample, era):
            continue
        own = _era_of(everything, sample)
        terms = ", ".join(
            f"{c} {sample.targets.get(c, math.nan):.2f}/{_component(era, sample, c):.2f}"
            f"/{_component(own, sample, c):.2f}"
            for c in COMPONENTS
        )
        lines.append(
            f"{sample.point.id} ({sample.point.thread}, era [{sample.era.introduced or ''}, "
            f"{sample.era.removed or ''})): KV logged "
            f"{sample.point.kv_gib}, held out {predicted_kv(sample, era):.2f}; weights estimated "
            f"{sample.weights_estimated:.2f} (logged {sample.point.weights_gib}); "
            f"logged/held out/in sample: {terms}"
        )
    return lines


def weights_score(points: Sequence[Point], catalog: Catalog) -> Score:
    """Estimated weights per GPU within 3 % of the logged figure (they do not depend on the fit)."""
    within = runs = 0
    for point in points:
        if not point.model_in_catalog or point.weights_gib is None or point.skip_weights:
            continue
        try:
            estimated = estimate(request_of(point), catalog).weights_gib
        except InputError:
            continue
        runs += 1
        within += abs(estimated - point.weights_gib) <= WEIGHT_TOLERANCE * point.weights_gib
    return Score(within, runs)


# --- output ----------------------------------------------------------------------------------


def _flow(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def eras_yaml(eras: Sequence[OverheadEra]) -> str:
    """The `overheads:` list as engines.yaml writes it."""
    lines: list[str] = []
    for era in eras:
        bounds = {"introduced": era.versions.introduced, "removed": era.versions.removed}
        given = ", ".join(f'{k}: "{v}"' for k, v in bounds.items() if v is not None)
        lines.append(f"  - versions: {{{given}}}")
        if era.whole_prompt_profile:
            lines.append("    whole_prompt_profile: true")
        if era.sampler_source_bytes is not None:
            lines.append(f"    sampler_source_bytes: {era.sampler_source_bytes:g}")
        for component in COMPONENTS:
            f: OverheadFit = getattr(era, component)
            lines.append(
                f"    {component}: {{coefficients: {_flow(f.coefficients)}, "
                f"spread_gib: {f.spread_gib:g}, runs: {f.runs}}}"
            )
        lines.append(f"    kv_spread_gib: {era.kv_spread_gib:g}")
        lines.append(f"    kv_runs: {era.kv_runs}")
    return "\n".join(lines) + "\n"


def write_catalog(eras: Sequence[OverheadEra], path: Path = ENGINES) -> None:
    """Replace the `overheads:` list, the last block of engines.yaml, keeping its comments."""
    text = path.read_text()
    head, marker, _ = text.partition("\noverheads:\n")
    if not marker:
        raise SystemExit(f"{path} has no `overheads:` block")
    path.write_text(head + marker + eras_yaml(eras))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite engines.yaml's overheads block")
    parser.add_argument("--as-is", action="store_true", help="score the catalog's coefficients, no refit")
    parser.add_argument("--misses", action="store_true", help="list each leave-one-thread-out miss by term")
    args = parser.parse_args(argv)
    catalog = load_catalog(ROOT / "rules")
    points = load_points()
    data = samples(points, catalog)
    current = catalog.engine.overheads
    with_kv = sum(kv_scored(s) for s in data)
    print(f"runs: {len(points)} in the dataset, {len(data)} resolvable, {with_kv} with KV")
    print(f"weights within 3 %: {weights_score(points, catalog)}")
    print(f"KV within max(0.5 GiB, 10 %), catalog as is: {kv_score(data, lambda s: current)}")
    if args.as_is:
        return 0
    eras = fit(data, catalog)
    print(f"KV within max(0.5 GiB, 10 %), fitted, in sample: {kv_score(data, lambda s: eras)}")
    print(f"KV within max(0.5 GiB, 10 %), leave-one-thread-out: {leave_one_thread_out(data, catalog)}")
    by_source = leave_one_group_out(data, catalog, lambda p: p.source)
    print(f"KV within max(0.5 GiB, 10 %), leave-one-source-out (URL without anchor): {by_source}")
    if args.misses:
        print("leave-one-thread-out misses (GiB; nan: not logged):")
        for line in thread_misses(data, catalog):
            print(f"  {line}")
    print("overheads:")
    print(eras_yaml(eras), end="")
    if args.write:
        write_catalog(eras)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
