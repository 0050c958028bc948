"""Failure words that report no failure of this run, by the genre or grammar they come in (a line
the run outlived, a script's comment, an FAQ's headings, a generic subject troubleshooting, a change
or proposal telling the mechanism it removes, memory pressure eased), stay no_failure; their twins
that report a failure keep its phase (tests/diagnosis/genre_probes.yaml, composed, not corpus cases)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from service.schemas import Diagnosis, Phase
from tests.diagnosis.probes import load_probes, probe_param


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    phase: Phase
    text: str
    known_gap: str | None = None  # what the classifier still misses: a non-strict xfail


PROBES = load_probes(Probe, "genre_probes.yaml")


def test_each_family_has_a_twin_that_keeps_its_failure() -> None:
    assert len({p.name for p in PROBES}) == len(PROBES) >= 20
    assert sum(p.phase != "no_failure" for p in PROBES) >= 6


def _param(probe: Probe) -> object:
    return probe_param(probe, probe.name)


@pytest.mark.parametrize("probe", [_param(p) for p in PROBES])
def test_a_genre_that_reports_nothing_is_no_failure_and_a_twin_keeps_its_phase(
    run_classify: Callable[..., Diagnosis], probe: Probe
) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary
    if probe.phase == "no_failure":
        assert not [f.rule for f in diagnosis.findings if f.severity == "error"]
