"""Pastes whose frames or stage lines decide the phase, in the shapes around a traceback other programs
print (tests/diagnosis/frame_probes_fourth*.yaml): Ray's `ray::RayWorkerWrapper.execute_method()`
chains, Jupyter cells, JSON records holding a `\\n`-escaped traceback, Windows paths, `>` quotes,
docker-compose and kubectl prefixes, stage lines of forks and later releases, and stacks whose
innermost vLLM frames are helpers every stage shares (the outer frame specific to one stage decides).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import yaml

from service.diagnosis.frames import held_traceback, vllm_file
from service.schemas import Diagnosis, Phase

Classify = Callable[..., Diagnosis]

HERE = Path(__file__).resolve().parent


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: str
    text: str
    phase: Phase
    known_gap: str | None = None  # what the classifier still misses: run as a non-strict xfail


def _probes(name: str) -> list[Probe]:
    data = yaml.safe_load((HERE / name).read_text(encoding="utf-8"))
    return msgspec.convert(data["probes"], list[Probe])


# the second batch was written after the mechanism and before any tuning to it
PROBES = [
    p for name in ("frame_probes_fourth.yaml", "frame_probes_fourth_second.yaml") for p in _probes(name)
]


def _param(probe: Probe) -> object:
    marks = [pytest.mark.xfail(reason=probe.known_gap, strict=False)] if probe.known_gap else []
    return pytest.param(probe, id=probe.id, marks=marks)


def test_the_probes_are_many_and_their_ids_unique() -> None:
    assert len(PROBES) >= 40
    assert len({p.id for p in PROBES}) == len(PROBES)


@pytest.mark.parametrize("probe", [_param(p) for p in PROBES])
def test_frames_and_stage_lines_place_the_failure_in_any_wrapping(
    run_classify: Classify, probe: Probe
) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary


def test_a_traceback_held_in_one_escaped_line_reads_as_its_frames() -> None:
    line = (
        '{"exception": "Traceback (most recent call last):\\n  File \\"C:\\\\\\\\venv\\\\\\\\Lib\\\\\\\\'
        'site-packages\\\\\\\\vllm\\\\\\\\worker\\\\\\\\worker.py\\", line 183, in load_model\\n'
        '    self.model_runner.load_model()"}'
    )
    held = held_traceback(line)
    assert held is not None
    assert (
        held.lines[1]
        == '  File "C:\\venv\\Lib\\site-packages\\vllm\\worker\\worker.py", line 183, in load_model'
    )
    assert vllm_file("C:\\\\venv\\\\site-packages\\\\vllm\\\\worker\\\\worker.py") == "worker/worker.py"
    assert held_traceback('  File "/x/vllm/worker/worker.py", line 1, in load_model') is None
