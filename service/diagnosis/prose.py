"""The person's words, read as a separate channel: what a sentence says failed, and when.

Prose lines are told from log lines by `normalize.is_prose`; the vocabulary is `rules/prose.yaml`.
A sentence is split into clauses; a clause counts when it says something failed, does not say
the failure went away, was avoided or is hypothetical ("the OOM went away after --enforce-eager",
"to avoid CUDA OOM we lowered --max-num-seqs", "没有再报错"), and names a stage. Only lines the
vocabulary's failure words hit are examined (one RE2 pass over the text), so long logs cost one scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.diagnosis.normalize import Document, Line, is_prose, run_of
from service.packs.prose import ProseVocabulary
from service.packs.signatures import Stage

__all__ = ["ProseCue", "is_negated_prose", "read_prose"]


@dataclass(frozen=True, slots=True)
class ProseCue:
    """One clause of a person's sentence that says something failed, and the stage it names."""

    line: int
    stage: Stage | None
    text: str


def _clauses(text: str, vocabulary: ProseVocabulary) -> list[str]:
    parts: list[str] = []
    start = 0
    for match in vocabulary.clause_break.finditer(text):
        parts.append(text[start : match.start()])
        start = match.end()
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _stage(clause: str, vocabulary: ProseVocabulary) -> Stage | None:
    for stage, pattern in vocabulary.stages:
        if pattern.search(clause):
            return stage
    return None


def read_prose(doc: Document, vocabulary: ProseVocabulary) -> list[ProseCue]:
    """Every affirmative failure clause in the document's prose lines, in line order."""
    cues: list[ProseCue] = []
    read: dict[str, list[tuple[Stage | None, str]]] = {}  # a line pasted again is read once
    data = doc.data
    pos, line_no, counted = 0, 1, 0
    while pos < len(data):
        match = vocabulary.failure.search(data, pos)
        if match is None:
            break
        start = data.rfind(b"\n", 0, match.start()) + 1
        end = data.find(b"\n", match.start())
        end = len(data) if end < 0 else end
        line_no += data.count(b"\n", counted, start)
        repeats, pos = run_of(data, data[start:end], end)
        line = doc.line(line_no)
        first, line_no, counted = line_no, line_no + repeats, pos
        if line.source or line.level:
            continue  # a logger or process prefix: a program printed it
        if line.text not in read:
            read[line.text] = _affirmed(line, vocabulary)
        for number in range(first, first + repeats):
            cues.extend(ProseCue(number, stage, clause) for stage, clause in read[line.text])
    return cues


def _affirmed(line: Line, vocabulary: ProseVocabulary) -> list[tuple[Stage | None, str]]:
    """The failure clauses a prose line affirms, with the stage each names."""
    if not is_prose(line):
        return []
    return [
        (_stage(clause, vocabulary), clause.strip())
        for clause in _clauses(line.text, vocabulary)
        if vocabulary.failure.search(clause) and not vocabulary.negation.search(clause)
    ]


def is_negated_prose(doc: Document, number: int, vocabulary: ProseVocabulary) -> bool:
    """Whether line `number` is a person's sentence that takes a failure back (a clause negates it)
    and affirms none."""
    line = doc.line(number)
    if not is_prose(line):
        return False
    clauses = _clauses(line.text, vocabulary)
    negated = any(vocabulary.negation.search(c) for c in clauses)
    affirmed = any(vocabulary.failure.search(c) and not vocabulary.negation.search(c) for c in clauses)
    return negated and not affirmed
