"""Probe sets written as data (`*_probes*.yaml` beside the tests): one reader and one way to run a
probe the classifier still misses (its `known_gap`) as a non-strict xfail, for every probe module."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec
import pytest
import yaml

from service.schemas import Phase

HERE = Path(__file__).resolve().parent


class HasGap(Protocol):
    @property
    def known_gap(self) -> str | None: ...


P = TypeVar("P")


class PhaseProbe(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A paste and the phase it must get: the shape most probe sets share."""

    id: str
    text: str
    phase: Phase
    known_gap: str | None = None  # what the classifier still misses: run as a non-strict xfail


def load_probes(kind: type[P], *names: str) -> list[P]:
    """The probes of the named files, in order, validated as `kind`."""
    probes: list[P] = []
    for name in names:
        data = yaml.safe_load((HERE / name).read_text(encoding="utf-8"))
        probes.extend(msgspec.convert(data["probes"], list[kind]))  # type: ignore[valid-type]
    return probes


def probe_param(probe: HasGap, id: str) -> Any:
    """`probe` as a pytest parameter; a known gap runs as a non-strict xfail."""
    marks = [pytest.mark.xfail(reason=probe.known_gap, strict=False)] if probe.known_gap else []
    return pytest.param(probe, id=id, marks=marks)
