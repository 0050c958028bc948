"""Tracebacks whose innermost vLLM frames are helpers every stage that runs the model shares (layers,
custom ops, attention backends and their metadata builders, samplers, V0's `execute_model`, which the
profile run calls): the outer frame specific to one stage decides (tests/diagnosis/
shared_frame_probes*.yaml, across V0 and V1, cut and whole, a platform plugin's worker)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from service.diagnosis.frames import OOM_PHASE, deepest_frame
from service.diagnosis.normalize import Document
from service.packs import RulePacks
from service.schemas import Diagnosis, Phase
from tests.diagnosis.probes import load_probes, probe_param

Classify = Callable[..., Diagnosis]


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: str
    text: str
    phase: Phase
    stage: str  # the stage of the frame that decides: the deepest the frame table places
    known_gap: str | None = None  # what the frame table still misses: its check runs as a non-strict xfail


# the second batch was written after the mechanism and before any tuning to it
PROBES = load_probes(Probe, "shared_frame_probes.yaml", "shared_frame_probes_second.yaml")


def _param(probe: Probe) -> object:
    return probe_param(probe, probe.id)


def test_the_probes_are_many_and_their_ids_unique() -> None:
    assert len(PROBES) >= 40
    assert len({p.id for p in PROBES}) == len(PROBES)


@pytest.mark.parametrize("probe", [pytest.param(p, id=p.id) for p in PROBES])
def test_a_shared_helper_frame_leaves_the_stage_to_the_outer_frames(
    run_classify: Classify, probe: Probe
) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary


@pytest.mark.parametrize("probe", [_param(p) for p in PROBES])
def test_the_deciding_frame_is_the_deepest_one_specific_to_a_stage(packs: RulePacks, probe: Probe) -> None:
    doc = Document(probe.text)
    place = deepest_frame(doc, packs.signatures.frames, 1, len(doc.lines))
    assert place is not None
    # profiling and warm-up share their phase: a frame both run (V1's `_dummy_run`) may name either
    assert OOM_PHASE[place.stage] == OOM_PHASE[probe.stage], f"{place.file}:{place.function}"
