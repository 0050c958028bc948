"""Pastes whose frames or stage lines decide the phase, in the shapes around a traceback other programs
print (tests/diagnosis/frame_probes_fourth*.yaml): Ray's `ray::RayWorkerWrapper.execute_method()`
chains, Jupyter cells, JSON records holding a `\\n`-escaped traceback, Windows paths, `>` quotes,
docker-compose and kubectl prefixes, stage lines of forks and later releases, and stacks whose
innermost vLLM frames are helpers every stage shares (the outer frame specific to one stage decides).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.diagnosis.frames import held_traceback, vllm_file
from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

Classify = Callable[..., Diagnosis]

Probe = PhaseProbe


# the second batch was written after the mechanism and before any tuning to it
PROBES = load_probes(Probe, "frame_probes_fourth.yaml", "frame_probes_fourth_second.yaml")


def _param(probe: Probe) -> object:
    return probe_param(probe, probe.id)


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
