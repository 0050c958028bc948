"""rules/prose.yaml's stages as a vocabulary: verbs inflected by English's regular rules, object-taking
verbs read beside their objects either way round, and the stages in their priority order."""

from __future__ import annotations

from pathlib import Path

import pytest
import re2

from service.packs.prose import StageWords, inflections, load_prose, stage_patterns

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.mark.parametrize(
    ("verb", "forms"),
    [
        ("capture", ["capture", "captures", "captured", "capturing"]),
        ("load", ["load", "loads", "loaded", "loading"]),
        ("fetch", ["fetch", "fetches", "fetched", "fetching"]),
        ("copy", ["copy", "copies", "copied", "copying"]),
        ("warm up", ["warm up", "warms up", "warmed up", "warming up"]),
        ("send|sends|sent|sending", ["send", "sends", "sent", "sending"]),
    ],
)
def test_a_verb_is_read_in_every_form(verb: str, forms: list[str]) -> None:
    assert inflections(verb) == forms


def _matches(words: StageWords, text: str) -> bool:
    options = re2.Options()
    options.case_sensitive = False
    return re2.compile("|".join(f"(?:{p})" for p in stage_patterns(words)), options).search(text) is not None


def test_an_object_taking_verb_names_the_stage_only_beside_its_object() -> None:
    words = StageWords(verbs_of=["allocate"], objects=["kv[ _-]?cache"])
    assert _matches(words, "it OOMs while allocating the GPU KV cache")
    assert _matches(words, "the KV cache is being allocated when it dies")
    assert not _matches(words, "it OOMs while allocating a 2 GiB tensor")


def test_the_stages_are_read_in_their_priority_order() -> None:
    stages = [stage for stage, _ in load_prose(RULES).stages]
    assert stages.index("warmup") < stages.index("serving")
    assert stages.index("loading") < stages.index("serving")
    assert stages[-1] == "init"  # start-up without its step gives way to any step named
