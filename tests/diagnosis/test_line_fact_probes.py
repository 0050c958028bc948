"""Round 13's line and fact families (tests/diagnosis/line_fact_probes.yaml, composed, not corpus
cases): a compressed-tensors scheme or a linear-kernel chooser that finds nothing for the checkpoint
is a quantization failure (a chooser's per-kernel reasons are its explanation, not a second failure);
a bare CPython message that V0's `logger.exception(e)` prints above its traceback names the error the
cut traceback stopped before; a cut profiling line, a person's stated compute capability, a trainer's
override keys, a value told back to a setting named above, and the context-length message's second
sentence on its own line each state their facts. Round 14's (line_fact_probes_fourteenth.yaml): a
`Killed` printed after vLLM killed its own process tree is no OOM killer's; Intel's out-of-resources
codes are a device out of memory; the engine's input dump states the config; a FlashAttention version
refusal is an attention-kernel choice, not the bfloat16 check; a quantized weight shape the
tensor-parallel split breaks, and CANN's refusal of a quantized matmul's scale dtype, are quantization
failures; torchao's current capability and settings told in words ("set to", a flag's initials) state
their facts."""

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
    facts: dict[str, object] = {}
    known_gap: str | None = None  # what the classifier still misses: a non-strict xfail


PROBES = load_probes(
    Probe, "line_fact_probes.yaml", "line_fact_probes_fourteenth.yaml", "line_fact_probes_lines11.yaml"
)


def test_probe_names_are_distinct() -> None:
    assert len({p.name for p in PROBES}) == len(PROBES) >= 20


@pytest.mark.parametrize("probe", [probe_param(p, p.name) for p in PROBES])
def test_a_probe_gets_its_phase_and_facts(run_classify: Callable[..., Diagnosis], probe: Probe) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase, diagnosis.summary
    stated = msgspec.to_builtins(diagnosis.facts)
    assert {name: stated.get(name) for name in probe.facts} == probe.facts
