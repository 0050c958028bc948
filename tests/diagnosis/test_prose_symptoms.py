"""A failure told only by its symptom, and a comparison of a working and a failing setting
(tests/diagnosis/prose_symptom_probes.yaml): a request that never finishes past a prompt length is
the KV cache's capacity, throughput collapsing under concurrency is preemption, a process that
vanishes with exit 137 is the host's RAM, and the setting that differs between a run that works and
one that fails names the phase its fix recipes serve; the same words negated or in the past leave
a healthy log healthy.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import load_probes, probe_param
from tests.diagnosis.test_prose_probes import Probe, paste

Classify = Callable[..., Diagnosis]

PROBES = load_probes(Probe, "prose_symptom_probes.yaml")


def test_the_probes_are_half_chinese_with_healthy_ones() -> None:
    chinese = [p for p in PROBES if any("\u4e00" <= ch <= "\u9fff" for ch in p.text)]
    assert len(PROBES) >= 40
    assert len(chinese) >= 0.4 * len(PROBES)
    assert sum(p.phase == "no_failure" for p in PROBES) >= 10


@pytest.mark.parametrize("probe", [probe_param(p, p.text[:40]) for p in PROBES])
def test_a_symptom_or_a_comparison_gives_the_phase_vllm_behaviour_gives(
    run_classify: Classify, probe: Probe
) -> None:
    diagnosis = run_classify(paste(probe))
    assert diagnosis.phase == probe.phase, diagnosis.summary
    if probe.with_ == "alone" and probe.phase != "no_failure":
        assert diagnosis.confidence <= 0.5  # words alone are never as sure as a log line
