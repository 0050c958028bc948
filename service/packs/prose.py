"""The prose vocabulary: which words in a person's sentence say that something failed, that memory
ran out (the host's or the GPU's), that it no longer does or is only asked about, and in which stage
(`rules/prose.yaml`). Decoded strictly and compiled with RE2 once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import re2

from service.errors import PackError
from service.packs.loader import load_yaml_file
from service.packs.signatures import Stage
from service.schemas import Phase

__all__ = ["ProseFile", "ProseVocabulary", "load_prose"]


class Cause(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A failure the person's words name as the cause of another's message (`of`)."""

    of: list[Phase]
    words: list[str]


class ProseFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    clause_breaks: list[str]
    failure: list[str]
    out_of_memory: list[str]
    phases: dict[Phase, list[str]]
    host: list[str]
    either: list[str]
    device: list[str]
    question: list[str]
    presupposed: list[str]
    negation: list[str]
    conjunctions: list[str]
    plain_negators: list[str]
    supposing: list[str]
    naming: list[str]
    experienced: list[str]
    stages: dict[Stage, list[str]]
    causes: dict[Phase, Cause]


@dataclass(frozen=True, slots=True)
class ProseVocabulary:
    """Each list OR-ed into one case-insensitive RE2 pattern; `said` is every word that says
    something failed (failure, out_of_memory, phases) together: what makes a line worth reading."""

    clause_break: Any
    failure: Any
    out_of_memory: Any
    phases: tuple[tuple[Phase, Any], ...]
    said: Any
    host: Any
    either: Any
    device: Any
    question: Any
    presupposed: Any
    negation: Any
    conjunction: Any
    plain_negator: Any  # a negation that opens with one of these governs one verb, not a condition
    supposing: Any  # an introducer ("you may see:") that only supposes the block it shows
    naming: Any  # a failure word as a noun's modifier ("the error message"), naming a thing
    experienced: Any  # verbs saying the person met what a naming compound names ("got the error message")
    stages: tuple[tuple[Stage, Any], ...]
    any_stage: Any  # every stage's words together: which lines say what the person was doing
    causes: tuple[tuple[Phase, frozenset[Phase], Any], ...]  # (cause, the phases it explains, words)
    any_cause: Any


def _compile(patterns: list[str], where: str) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = False
    joined = "|".join(f"(?:{p})" for p in patterns)
    try:
        return re2.compile(joined, options)
    except re2.error as exc:
        raise PackError("prose.yaml", f"a pattern RE2 cannot compile ({exc})", path=where) from exc


def load_prose(rules_dir: Path) -> ProseVocabulary:
    """Decode and compile `rules_dir/prose.yaml`."""
    data = load_yaml_file(rules_dir / "prose.yaml", ProseFile, root=rules_dir)
    return ProseVocabulary(
        clause_break=_compile(data.clause_breaks, "$.clause_breaks"),
        failure=_compile(data.failure, "$.failure"),
        out_of_memory=_compile(data.out_of_memory, "$.out_of_memory"),
        phases=tuple((phase, _compile(p, f"$.phases.{phase}")) for phase, p in data.phases.items()),
        said=_compile(
            [*data.failure, *data.out_of_memory, *(p for ps in data.phases.values() for p in ps)],
            "$.failure",
        ),
        host=_compile(data.host, "$.host"),
        either=_compile(data.either, "$.either"),
        device=_compile(data.device, "$.device"),
        question=_compile(data.question, "$.question"),
        presupposed=_compile(data.presupposed, "$.presupposed"),
        negation=_compile(data.negation, "$.negation"),
        conjunction=_compile(data.conjunctions, "$.conjunctions"),
        plain_negator=_compile(data.plain_negators, "$.plain_negators"),
        supposing=_compile(data.supposing, "$.supposing"),
        naming=_compile(data.naming, "$.naming"),
        experienced=_compile(data.experienced, "$.experienced"),
        stages=tuple((stage, _compile(p, f"$.stages.{stage}")) for stage, p in data.stages.items()),
        any_stage=_compile([p for ps in data.stages.values() for p in ps], "$.stages"),
        causes=tuple(
            (phase, frozenset(cause.of), _compile(cause.words, f"$.causes.{phase}.words"))
            for phase, cause in data.causes.items()
        ),
        any_cause=_compile([p for c in data.causes.values() for p in c.words], "$.causes"),
    )
