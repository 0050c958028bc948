"""Budgets told rather than logged (tests/diagnosis/told_budget_probes.yaml): a host memory limit stated
as a setting (docker, compose, k8s, systemd, SLURM, ulimit, a person's "6GB container") read against
what loading, CPU offload and V0's swap space keep in host RAM says whose memory ran out when the words
do not; and a model, a size class ("13B") or a GPU's memory ("a 24GB card") named only in the person's
words sizes the budget that places a bare CUDA OOM. Healthy logs with such words stay healthy."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

Classify = Callable[..., Diagnosis]

PROBES = load_probes(PhaseProbe, "told_budget_probes.yaml")


def test_the_probes_cover_limits_words_and_healthy_twins() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES) >= 25
    for part in ("host-limit-", "host-plenty-", "words-model-", "words-size-class-", "words-gpu-memory-"):
        assert any(p.id.startswith(part) for p in PROBES), part
    assert sum(p.phase == "no_failure" for p in PROBES) >= 4


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_told_limit_or_a_model_named_in_words_reads_the_budget(
    run_classify: Classify, probe: PhaseProbe
) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary
