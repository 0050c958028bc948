"""The platform plugins' and forks' own messages (tests/diagnosis/plugin_probes.yaml): a paste built from a
plugin's template with the numbers a run prints is placed in the phase its meaning says (a plugin's "not
enough memory for the KV cache" is the KV-capacity failure, its device allocator's out-of-memory the OOM of
the stage it occurs in), and its healthy lines flag nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import yaml

from service.schemas import Diagnosis, Phase

Classify = Callable[..., Diagnosis]
HERE = Path(__file__).resolve().parent


class Probe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    text: str
    phase: Phase
    known_gap: str | None = None


# plugin_probes.yaml: the plugins' own templates; plugin_allocator_probes.yaml: their device allocators'
# failures (CANN through torch_npu, Gaudi's PT_DEVMEM) and memory checks (vllm-metal) with twins;
# plugin_allocator_probes_platforms12.yaml: other accelerator runtimes' device-memory exhaustion
# (AWS Neuron, Tenstorrent tt-metal, Cambricon MLU, Moore Threads MUSA, CANN EI0011) with twins;
# wrapper_probes_lines13.yaml: the wrappers' own memory, length and layout errors (lmdeploy, TRL, verl,
# Xinference, LLaMA-Factory)
_FILES = (
    "plugin_probes.yaml",
    "plugin_allocator_probes.yaml",
    "plugin_allocator_probes_platforms12.yaml",
    "wrapper_probes_lines13.yaml",
)


def _probes() -> list[Probe]:
    out: list[Probe] = []
    for name in _FILES:
        data = yaml.safe_load((HERE / name).read_text(encoding="utf-8"))
        out += msgspec.convert(data["probes"], list[Probe])
    return out


_PROBES = _probes()


@pytest.mark.parametrize(
    "probe",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=p.known_gap, strict=False) if p.known_gap else ())
        for p in _PROBES
    ],
    ids=[f"{i}-{p.phase}" for i, p in enumerate(_PROBES)],
)
def test_plugin_message_is_placed_by_its_meaning(run_classify: Classify, probe: Probe) -> None:
    assert run_classify(probe.text).phase == probe.phase
