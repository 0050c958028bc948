"""A tensor-parallel shard that is no whole number of a block-quantized checkpoint's blocks (vLLM's
block-FP8 shape check, `block_k` or `block_n`) is quantization_config, bare, hard-wrapped, in the
worker wrapper and quoted in prose (tests/diagnosis/quant_block_shard_probes.yaml)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.schemas import Diagnosis
from tests.diagnosis.probes import PhaseProbe, load_probes, probe_param

PROBES = load_probes(PhaseProbe, "quant_block_shard_probes.yaml")


@pytest.mark.parametrize("probe", [probe_param(p, p.id) for p in PROBES])
def test_a_shard_not_a_whole_number_of_quantization_blocks_is_quantization_config(
    run_classify: Callable[..., Diagnosis], probe: PhaseProbe
) -> None:
    assert run_classify(probe.text).phase == probe.phase
