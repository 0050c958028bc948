"""Tracebacks through the platform plugins' and forks' own modules (tests/diagnosis/plugin_frame_probes.yaml):
a frame of a plugin package named in tools/vllm_sources.py PLUGINS (`tpu_inference`, `aphrodite`,
`optimum/neuron/vllm`, `vllm_*`) is placed in the stage of vLLM's function it mirrors, with or without
the exception line."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

Classify = Callable[..., Diagnosis]

Probe = PhaseProbe


PROBES = load_probes(Probe, "plugin_frame_probes.yaml")


def test_the_probes_ids_are_unique() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES)


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_plugin_frame_places_the_failure(run_classify: Classify, probe: Probe) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary
