"""The corpus itself is data other tests trust, so it is checked before anyone classifies it.

Each failing-log case is a `<case>.log` with a `<case>.yaml` of expectations. These tests prove the
expectations are well-formed (DESIGN §3.1 phases, §3.2 fact names and types), that every fact a
case asserts is really stated in its log (numbers found in the text, sizes converted to GiB), and
that the corpus covers every phase, as the classifier's judges will. They never run the classifier:
`tests/diagnosis/` does that against these same files.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Literal

import msgspec
import pytest

from service.packs.loader import load_yaml_file
from service.schemas import PHASES, Facts, Phase

CORPUS = Path(__file__).resolve().parent
HEALTHY = CORPUS.parent / "healthy"
HEALTHY_EXCERPTS = CORPUS.parent / "diagnosis" / "healthy_excerpts"
# Rounds collected from public threads, scored before any classifier change (REALWORLD.md).
HELD_OUT = re.compile(r"^gh[456]-")
COMMON_PHASES = ("startup_budget", "weights_oom", "kv_cache_capacity", "warmup_oom", "runtime_oom")
VERSION = re.compile(r"^\d+\.\d+\.\d+(\.post\d+)?$")


class VersionRange(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    min: str
    max: str


class Hints(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    model: str | None = None
    gpu: str | None = None
    vllm_version: str | None = None
    command: str | None = None


CarriedBy = Literal["line", "frame", "words"]


class CorpusCase(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One `<case>.yaml`: what a correct diagnosis of `<case>.log` must say.

    `carried_by` says what decides the phase (the message line, only a traceback frame or stage
    line, only the person's words); `decisive_line` is a substring of that line, for the leave-out
    probes of tools/score_corpus.py; `known_miss` is what the current classifier gets wrong (the
    case is an expected failure in tests/diagnosis until a general change fixes it).
    """

    phase: Phase
    vllm_version: str | None
    facts: Facts = msgspec.field(default_factory=Facts)
    vllm_range: VersionRange | None = None
    hints: Hints | None = None
    carried_by: CarriedBy | None = None
    decisive_line: str | None = None
    known_miss: str | None = None
    source: str
    note: str


class HealthyExcerpt(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The optional `<excerpt>.yaml` beside a healthy excerpt: where it is from, why it is healthy."""

    source: str
    note: str
    known_miss: str | None = None


def _case_names() -> list[str]:
    return sorted(p.stem for p in CORPUS.glob("*.log"))


def _load(name: str) -> CorpusCase:
    return load_yaml_file(CORPUS / f"{name}.yaml", CorpusCase, root=CORPUS)


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


_UNIT = {"bytes": 2.0**-30, "B": 2.0**-30, "KiB": 2.0**-20, "MiB": 2.0**-10, "GiB": 1.0, "GB": 1.0}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s?(bytes|KiB|MiB|GiB|GB|B)\b")
_PAIR = re.compile(r"(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) GiB")
_RATIO_GIB = re.compile(r"\((\d+(?:\.\d+)?), (\d+(?:\.\d+)?) GiB\)")
_DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+)")


def _stated_gib(text: str) -> set[float]:
    """Every memory size the text states, converted to GiB exactly as DESIGN §3.2 asks."""
    values = {float(n) * _UNIT[u] for n, u in _SIZE.findall(text)}
    for free, total in _PAIR.findall(text):
        values |= {float(free), float(total)}
    values |= {float(gib) for _, gib in _RATIO_GIB.findall(text)}
    return values


def _states_int(text: str, value: int) -> bool:
    plain = str(value)
    grouped = f"{value:,}"
    return any(re.search(rf"(?<![\d.,]){re.escape(form)}(?![\d])", text) for form in {plain, grouped})


def _unstated(facts: Facts, text: str) -> list[str]:
    """Names of asserted facts that no line of the log states."""
    missing: list[str] = []
    gib = _stated_gib(text)
    decimals = {float(d) for d in _DECIMAL.findall(text)}
    for name, value in msgspec.structs.asdict(facts).items():
        if value is None:
            continue
        if name == "other_processes":
            for proc in value:
                if not re.search(rf"Process {proc.pid} has ", text) or proc.used_gib not in gib:
                    missing.append(f"{name}[pid={proc.pid}]")
        elif isinstance(value, bool):
            spelled = ("enforce_eager", "enforce-eager")
            if not any(s in text for s in spelled):
                missing.append(name)
        elif isinstance(value, int):
            if not _states_int(text, value):
                missing.append(name)
        elif isinstance(value, float):
            pool = gib if name.endswith("_gib") else decimals
            if value not in pool:
                missing.append(name)
        elif name == "dtype":
            if not re.search(rf"\b(torch\.)?{value}\b", text) and not (
                value == "float16" and re.search(r"\bhalf\b", text)
            ):
                missing.append(name)
        elif name == "compute_capability":
            if value not in text and value.replace(".", "") not in text:
                missing.append(name)
        elif str(value) not in text:
            missing.append(name)
    return missing


def test_every_log_has_expectations_and_every_expectation_a_log() -> None:
    logs = {p.stem for p in CORPUS.glob("*.log")}
    expectations = {p.stem for p in CORPUS.glob("*.yaml")}
    assert logs == expectations, f"unpaired: {sorted(logs ^ expectations)}"


@pytest.mark.parametrize("name", _case_names())
def test_expectations_use_the_design_vocabulary(name: str) -> None:
    case = _load(name)
    assert case.phase != "no_failure", "healthy logs belong in tests/healthy/"
    assert case.source.strip() and case.note.strip()
    if case.vllm_version is not None:
        assert VERSION.match(case.vllm_version), case.vllm_version
        if case.facts.vllm_version is not None:
            assert case.facts.vllm_version == case.vllm_version
    if case.vllm_range is not None:
        assert VERSION.match(case.vllm_range.min) and VERSION.match(case.vllm_range.max)


@pytest.mark.parametrize("name", _case_names())
def test_every_asserted_fact_is_stated_in_the_log(name: str) -> None:
    case = _load(name)
    text = _text(CORPUS / f"{name}.log")
    assert _unstated(case.facts, text) == []


@pytest.mark.parametrize("name", _case_names())
def test_held_out_cases_say_what_decides_them_and_where(name: str) -> None:
    case = _load(name)
    if HELD_OUT.match(name):
        assert case.carried_by is not None, "held-out cases say what carries the phase"
        assert re.search(r"https://github\.com/\S+/(issues|pull)/\d+", case.source), case.source
    if case.decisive_line is not None:
        assert case.decisive_line in _text(CORPUS / f"{name}.log"), "decisive_line is not in the log"
    if case.known_miss is not None:
        assert case.known_miss.strip(), "an empty known_miss hides nothing and says nothing"


@pytest.mark.parametrize("path", sorted(HEALTHY_EXCERPTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_healthy_excerpt_sidecars_name_their_source(path: Path) -> None:
    excerpt = load_yaml_file(path, HealthyExcerpt, root=HEALTHY_EXCERPTS)
    assert path.with_suffix(".log").exists(), "a sidecar without its excerpt"
    assert excerpt.source.strip() and excerpt.note.strip()
    assert excerpt.known_miss is None or excerpt.known_miss.strip()


def test_held_out_healthy_excerpts_have_sidecars() -> None:
    held_out = [p for p in HEALTHY_EXCERPTS.glob("gh*-*.log") if HELD_OUT.match(p.name)]
    missing = [p.stem for p in held_out if not p.with_suffix(".yaml").exists()]
    assert not missing


def test_corpus_covers_every_phase_the_classifier_must_tell_apart() -> None:
    counts = Counter(_load(name).phase for name in _case_names())
    assert sum(counts.values()) >= 45
    for phase in PHASES:
        if phase == "no_failure":
            continue
        wanted = 5 if phase in COMMON_PHASES else 2
        assert counts[phase] >= wanted, f"{phase}: {counts[phase]} cases, want {wanted}"


def test_most_cases_are_modelled_on_real_issue_threads() -> None:
    thread = re.compile(r"\b(issue|pull request) #\d+")
    modelled = [n for n in _case_names() if thread.search(_load(n).source)]
    assert len(modelled) >= 20


def test_corpus_spans_v0_and_v1_engine_eras() -> None:
    versions = [_load(n).vllm_version for n in _case_names()]
    minors = {tuple(int(x) for x in v.split(".")[:2]) for v in versions if v}
    assert any(m < (0, 8) for m in minors), "no V0-era (<0.8) case"
    assert any(m >= (0, 20) for m in minors), "no recent V1 (>=0.20) case"


def test_healthy_corpus_is_large_and_has_no_expectation_files() -> None:
    logs = sorted(HEALTHY.glob("*.log"))
    assert len(logs) >= 12
    assert not list(HEALTHY.glob("*.yaml")), "a healthy log's only expectation is no_failure"
    sizing = re.compile(r"# (GPU|cuda) blocks: \d|KV cache size: [\d,]+ tokens|Available KV cache memory")
    for path in logs:
        text = _text(path)
        assert sizing.search(text), f"{path.name} never states how its KV cache was sized"
        assert "Application startup complete" in text, f"{path.name} never finishes starting"
