"""Whose code a traceback frame is (tests/diagnosis/frame_owner_probes.yaml): a frame of a library
that runs in every stage leaves the stage to the person's words and the log's markers, a frame of
vLLM's call graph or of a fixed-stage library still decides, and pytest's reports are tracebacks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

Classify = Callable[..., Diagnosis]

PROBES = load_probes(PhaseProbe, "frame_owner_probes.yaml")


def test_the_probes_ids_are_unique() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES)


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_the_frame_owner_decides_how_much_a_frame_counts(run_classify: Classify, probe: PhaseProbe) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary
