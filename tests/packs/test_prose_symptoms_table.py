"""rules/prose.yaml's symptoms as a table: each row pairs a listed symptom with listed conditions, and
a row naming either that is not listed fails the load with its path."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.packs.prose import Symptoms, load_prose

RULES = Path(__file__).resolve().parents[2] / "rules"


def test_every_symptom_row_names_listed_words_and_conditions() -> None:
    vocabulary = load_prose(RULES)
    symptoms = {name for name, _ in vocabulary.symptoms}
    conditions = {name for name, _ in vocabulary.symptom_conditions}
    assert vocabulary.symptom_phases
    for symptom, when, _ in vocabulary.symptom_phases:
        assert symptom in symptoms
        assert conditions.issuperset(when)


def test_a_row_naming_an_unlisted_condition_is_refused_with_its_path() -> None:
    data = {
        "words": {"stalled": ["hangs"]},
        "conditions": {"length": ["long prompts"]},
        "phases": [{"symptom": "stalled", "when": ["concurrency"], "phase": "kv_preemption"}],
        "silent": [],
    }
    with pytest.raises(msgspec.ValidationError, match=r"phases\[0\]"):
        msgspec.convert(data, Symptoms)
