"""A release's own messages are read as soon as its sources are: pastes composed from vLLM 0.34.0's
templates and from a minor's first release (0.11.0's wordings its later patch removed) get the phase
their meaning says (tests/diagnosis/release_probes.yaml)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

PROBES = load_probes(PhaseProbe, "release_probes.yaml")


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_new_releases_message_gets_the_phase_of_its_meaning(
    run_classify: Callable[..., Diagnosis], probe: PhaseProbe
) -> None:
    assert run_classify(probe.text).phase == probe.phase
