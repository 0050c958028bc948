"""Messages vLLM and the wrappers print without raising them (an OpenAI error body a client prints, an
exception built and handed on, a `warnings.warn`, a `sys.exit`), filled from their templates in the
cached sources (built_message_probes_lines14.yaml), are placed by their meaning; and a non-memory
exception beside memory-looking flags and figures is `not_memory` naming it
(nonmemory_near_flags_probes_lines14.yaml)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from service.schemas import Diagnosis, Phase
from tests.diagnosis.probes import load_probes, probe_param

Classify = Callable[..., Diagnosis]


class NamedProbe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A paste, its phase, and (for `not_memory`) a part of the title that names the exception."""

    text: str
    phase: Phase
    named: str | None = None
    known_gap: str | None = None


_BUILT = load_probes(NamedProbe, "built_message_probes_lines14.yaml")
_NEAR_FLAGS = load_probes(NamedProbe, "nonmemory_near_flags_probes_lines14.yaml")


@pytest.mark.parametrize("probe", [probe_param(p, f"{i}-{p.phase}") for i, p in enumerate(_BUILT)])
def test_a_built_message_is_placed_by_its_meaning(run_classify: Classify, probe: NamedProbe) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == probe.phase
    if probe.named:
        assert probe.named in diagnosis.title


@pytest.mark.parametrize("probe", [probe_param(p, f"{i}-{p.phase}") for i, p in enumerate(_NEAR_FLAGS)])
def test_a_non_memory_exception_beside_memory_flags_is_named(
    run_classify: Classify, probe: NamedProbe
) -> None:
    diagnosis = run_classify(probe.text)
    assert diagnosis.phase == "not_memory"
    assert probe.named is not None and probe.named in diagnosis.title
