"""A compiled kernel's refusal (CUTLASS built for no kernel of this capability: quantization_config;
Marlin's tiles not dividing a tensor-parallel shard: parallelism_config) keeps its phase bare, inside
V1's `Worker failed with error '…'` wrapper and quoted above a cut worker traceback; the profiling
assertion named in prose is profiling_inconsistent (tests/diagnosis/kernel_refusal_probes.yaml)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

PROBES = load_probes(PhaseProbe, "kernel_refusal_probes.yaml")


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_kernel_refusal_or_a_named_profiling_assertion_keeps_its_phase(
    run_classify: Callable[..., Diagnosis], probe: PhaseProbe
) -> None:
    assert run_classify(probe.text).phase == probe.phase
