"""The classifier against the corpus: every case's phase, the facts it lists (exactly), its version;
every healthy log gives no_failure with no error-severity finding.

The corpus (tests/corpus, tests/healthy) is written independently of the rules; a failure here is
fixed by improving general rules or interpretation, never by special-casing a case.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import msgspec
import pytest

from service.core import classify
from service.diagnosis.facts import version_tuple
from service.packs import RulePacks
from service.packs.loader import load_yaml_file
from service.schemas import DiagnoseRequest, Facts, Phase

TESTS = Path(__file__).resolve().parent.parent
CORPUS = TESTS / "corpus"
HEALTHY = TESTS / "healthy"
# Real pastes that show no failure but are not whole boots (stats lines only, a boot cut before its
# KV sizing), so tests/healthy (full successful startups) cannot hold them.
HEALTHY_EXCERPTS = Path(__file__).resolve().parent / "healthy_excerpts"


class VersionRange(msgspec.Struct, frozen=True):
    min: str
    max: str


class Hints(msgspec.Struct, frozen=True):
    model: str | None = None
    gpu: str | None = None
    vllm_version: str | None = None
    command: str | None = None


class Case(msgspec.Struct, frozen=True, kw_only=True):
    phase: Phase
    vllm_version: str | None = None
    facts: Facts = msgspec.field(default_factory=Facts)
    vllm_range: VersionRange | None = None
    hints: Hints | None = None
    carried_by: Literal["line", "frame", "words"] | None = None
    decisive_line: str | None = None
    known_miss: str | None = None
    source: str = ""
    note: str = ""


class HealthyExcerpt(msgspec.Struct, frozen=True, kw_only=True):
    source: str = ""
    note: str = ""
    known_miss: str | None = None


def _known_miss(reason: str | None) -> list[pytest.MarkDecorator]:
    """A case the classifier is known to get wrong stays visible: an xfail that says what it misses."""
    return [pytest.mark.xfail(strict=False, reason=reason)] if reason else []


def _cases() -> list[object]:
    names = sorted(p.stem for p in CORPUS.glob("*.log"))
    cases = {n: load_yaml_file(CORPUS / f"{n}.yaml", Case, root=CORPUS) for n in names}
    return [pytest.param(n, id=n, marks=_known_miss(cases[n].known_miss)) for n in names]


def _healthy() -> list[str]:
    return sorted(p.stem for p in HEALTHY.glob("*.log"))


def _healthy_excerpts() -> list[object]:
    params: list[object] = []
    for log in sorted(HEALTHY_EXCERPTS.glob("*.log")):
        sidecar = log.with_suffix(".yaml")
        excerpt = load_yaml_file(sidecar, HealthyExcerpt, root=HEALTHY_EXCERPTS) if sidecar.exists() else None
        params.append(pytest.param(log.stem, id=log.stem, marks=_known_miss(excerpt and excerpt.known_miss)))
    return params


def _log(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _same(expected: object, actual: object) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _same(e, a) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_same(expected[k], actual[k]) for k in expected)
    return expected == actual


@pytest.mark.parametrize("name", _cases())
def test_corpus_case_is_diagnosed(packs: RulePacks, name: str) -> None:
    case = load_yaml_file(CORPUS / f"{name}.yaml", Case, root=CORPUS)
    hints = msgspec.structs.asdict(case.hints) if case.hints else {}
    diagnosis = classify(DiagnoseRequest(log=_log(CORPUS / f"{name}.log"), **hints), packs)
    assert diagnosis.phase == case.phase, diagnosis.summary
    expected = msgspec.to_builtins(case.facts)
    actual = msgspec.to_builtins(diagnosis.facts)
    wrong = {k: (v, actual.get(k)) for k, v in expected.items() if not _same(v, actual.get(k))}
    assert not wrong, f"(expected, got): {wrong}"
    engine = diagnosis.engine
    if engine.version and case.vllm_version:
        assert version_tuple(engine.version) == version_tuple(case.vllm_version)
    if engine.range and (case.vllm_range or case.vllm_version):
        low, high = _bounds(engine.range)
        true_low = version_tuple(case.vllm_range.min if case.vllm_range else case.vllm_version)
        true_high = version_tuple(case.vllm_range.max if case.vllm_range else case.vllm_version)
        assert true_low is not None and true_high is not None
        assert low <= true_high and true_low <= high, f"inferred {engine.range} excludes the log's version"


def _bounds(text: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    low, high = (0, 0, 0), (999, 0, 0)
    for part in text.split(","):
        version = version_tuple(part.lstrip("<>="))
        assert version is not None
        if part.startswith(">="):
            low = version
        elif part.count(".") == 1:
            high = (version[0], version[1], 999)
        else:
            high = version
    return low, high


@pytest.mark.parametrize("name", _healthy())
def test_healthy_log_is_no_failure(packs: RulePacks, name: str) -> None:
    diagnosis = classify(DiagnoseRequest(log=_log(HEALTHY / f"{name}.log")), packs)
    assert diagnosis.phase == "no_failure", diagnosis.summary
    errors = [f for f in diagnosis.findings if f.severity == "error"]
    assert not errors


@pytest.mark.parametrize("name", _healthy_excerpts())
def test_healthy_excerpt_is_no_failure(packs: RulePacks, name: str) -> None:
    diagnosis = classify(DiagnoseRequest(log=_log(HEALTHY_EXCERPTS / f"{name}.log")), packs)
    assert diagnosis.phase == "no_failure", diagnosis.summary
    assert not [f for f in diagnosis.findings if f.severity == "error"]


def test_corpus_is_present() -> None:
    assert len(_cases()) >= 40
