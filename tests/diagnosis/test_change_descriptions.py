"""Pastes that describe a change, a mechanism, a release or a hypothetical stay no_failure; pastes that
report a failure of the person's own run keep its phase, also inside a pull request
(tests/diagnosis/change_probes.yaml, composed from the general forms, not from a corpus round)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from service.schemas import Diagnosis, Phase
from tests.diagnosis.probes import load_probes, probe_param


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    batch: int
    phase: Phase
    text: str
    known_gap: str | None = None  # what the classifier still misses: a non-strict xfail


PROBES = load_probes(Probe, "change_probes.yaml")


def _param(probe: Probe) -> object:
    return probe_param(probe, probe.name)


def test_the_probes_are_many_of_both_kinds_and_some_chinese() -> None:
    assert len(PROBES) >= 40
    assert len({p.name for p in PROBES}) == len(PROBES)
    assert sum(p.phase != "no_failure" for p in PROBES) >= 12
    assert sum(any("\u4e00" <= ch <= "\u9fff" for ch in p.text) for p in PROBES) >= 8


@pytest.mark.parametrize("probe", [_param(p) for p in PROBES])
def test_a_change_description_is_no_failure_and_a_report_keeps_its_phase(
    run_classify: Callable[..., Diagnosis], probe: Probe
) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary
    if probe.phase == "no_failure":
        assert not [f.rule for f in diagnosis.findings if f.severity == "error"]
