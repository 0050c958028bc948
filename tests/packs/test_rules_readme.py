"""The authoring guide's own example rule loads, passes `rules test`, and classifies its line."""

from __future__ import annotations

import re
from pathlib import Path

from service.core import classify
from service.diagnosis.examples import check_rule
from service.packs import default_rules_dir, load_packs
from service.schemas import DiagnoseRequest

README = default_rules_dir() / "README.md"


def _example_pack() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- example-rule -->\s*```yaml\n(.*?)```\s*<!-- /example-rule -->", text, re.S)
    assert match, "rules/README.md lost its example rule block"
    return match.group(1)


def test_guide_example_is_one_yaml_edit_that_passes_its_examples(rules_copy: Path) -> None:
    (rules_copy / "signatures" / "example.yaml").write_text(_example_pack(), encoding="utf-8")
    packs = load_packs(rules_copy)
    compiled = packs.signatures.by_id["vllm-example-hybrid-block-size"]
    assert check_rule(packs, compiled) == []
    line = compiled.rule.examples.match[0].line
    diagnosis = classify(DiagnoseRequest(log=f"INFO 01-01 00:00:00 metrics.py:1] {line}"), packs)
    assert diagnosis.facts.block_size == 528
    assert diagnosis.fact_sources["block_size"] == "line 1"
