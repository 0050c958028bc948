"""Pastes of several processes (tests/diagnosis/process_probes.yaml): the API server's, a Ray task's,
a multiproc worker's, torchrun's or a compose service's wrapper line in one process and the failing
engine core's or worker's own error in another, across every phase; pastes holding only the wrapper."""

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
    known_gap: str | None = None


PROBES = load_probes(Probe, "process_probes.yaml")


def test_the_probes_are_many_and_cover_every_process_kind() -> None:
    assert len(PROBES) >= 25
    assert len({p.id for p in PROBES}) == len(PROBES)
    text = "\n".join(p.text for p in PROBES)
    for prefix in (
        "(APIServer pid=",
        "(EngineCore_DP0 pid=",
        "(RayWorkerWrapper pid=",
        "(VllmWorker rank=",
        "[rank3]:",
        "-1  | ",
    ):
        assert prefix in text


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_wrapper_line_is_read_with_the_failing_process(run_classify: Classify, probe: Probe) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary


def test_a_wrapper_alone_is_no_memory_verdict_and_not_sure(run_classify: Classify) -> None:
    alone = [p for p in PROBES if p.phase == "not_memory" and "only" in p.id]
    assert alone
    for probe in alone:
        assert run_classify(probe.text).confidence <= 0.6, probe.id
