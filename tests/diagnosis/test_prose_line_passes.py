"""The person's-words whole-text passes: the lines a vocabulary's line finders hit are the lines its
OR matches inside, on pastes of every kind (log lines, sentences, repeated lines, a dense log)."""

from __future__ import annotations

from pathlib import Path

import re2

from service.diagnosis.normalize import Document, hit_runs
from service.diagnosis.prose import _prose_lines
from service.packs import RulePacks
from service.packs.loader import load_yaml_file
from service.packs.prose import ProseFile, stage_patterns
from service.packs.signatures import COMBINED_MAX_MEM, unbounded_form

RULES = Path(__file__).resolve().parents[2] / "rules"
CORPUS = Path(__file__).resolve().parents[1] / "corpus"
SENTENCES = (
    "I get CUDA out of memory when loading the model, it crashes during warmup",
    "vLLM fails to start: not enough memory for the KV cache at 32k",
    "My pods get OOMKilled\nwhile the weights\nload (see below)",
    "可能会出现如下情况：",
    "## FAQ",
    "This PR fixes the OOM during profiling; we reduce the activation peak",
    "Problem: the engine ran out of memory after 2 hours of serving",
)


def _or(patterns: list[str]) -> object:
    """A vocabulary's patterns OR-ed as the whole-text pass compiled them before line finders."""
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = False
    options.max_mem = COMBINED_MAX_MEM
    return re2.compile("|".join(f"(?:{p})" for p in patterns), options)


def _pastes() -> list[str]:
    logs = [p.read_text(errors="replace") for p in sorted(CORPUS.glob("*.log"))[::9]]
    sentences = "\n".join(SENTENCES)
    tripled = "\n".join(line for line in logs[0].split("\n") for _ in range(3))
    return [*logs, sentences, f"{sentences}\n{logs[1]}\n{sentences}", tripled, "\n".join(logs)]


def test_each_words_pass_reads_the_lines_its_vocabulary_matches_inside(packs: RulePacks) -> None:
    data = load_yaml_file(RULES / "prose.yaml", ProseFile, root=RULES)
    vocabulary = packs.prose
    said = [
        *data.failure,
        *data.out_of_memory,
        *(p for ps in data.phases.values() for p in ps),
        *(p for ps in data.symptoms.words.values() for p in ps),  # a failure told by its symptom
    ]
    passes = {
        "said_lines": [unbounded_form(p) for p in said],
        "change_named": [p.removeprefix("^") for p in data.change.subjects],
        "any_stage": [p for words in data.stages.values() for p in stage_patterns(words)],
        "any_cause": [p for cause in data.causes.values() for p in cause.words],
    }
    for name, patterns in passes.items():
        whole = _or(patterns)
        for paste in _pastes():
            doc = Document(paste)
            expected = [
                (doc.line(index + 1).number, repeats)
                for index, repeats in hit_runs(doc.data, whole)
                if not doc.line(index + 1).source and not doc.line(index + 1).level
            ]
            found = [
                (line.number, repeats)
                for line, repeats in _prose_lines(Document(paste), getattr(vocabulary, name))
            ]
            assert found == expected, name
