"""Bare OOMs placed by the estimator's arithmetic (tests/diagnosis/budget_probes.yaml): the model, dtype,
quantization, parallel size and GPU a paste, its hints or its launch command name decide whether the
weights per GPU could have loaded, and the allocator's "this process has … in use" how far the failing
process got; a stage frame still decides, and a paste naming no catalog model is left as it was."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from service.schemas import Diagnosis, Phase
from tests.diagnosis.probes import load_probes, probe_param

Classify = Callable[..., Diagnosis]


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: str
    text: str
    phase: Phase
    hints: dict[str, str] = msgspec.field(default_factory=dict)
    known_gap: str | None = None


PROBES = load_probes(Probe, "budget_probes.yaml")


def test_the_probes_cover_each_reading_and_its_twins() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES)
    for part in ("weights-exceed", "weights-fit", "in-use-far-below", "in-use-at-weights-and-kv", "frame-"):
        assert any(p.id.startswith(part) for p in PROBES), part


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_bare_oom_is_placed_by_the_budget_of_what_the_paste_names(
    run_classify: Classify, probe: Probe
) -> None:
    diagnosis = run_classify(probe.text, **probe.hints)
    assert diagnosis.phase == probe.phase, diagnosis.summary
