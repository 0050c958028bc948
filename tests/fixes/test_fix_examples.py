"""Every recipe's own examples: the YAML says what a recipe answers, and this proves it does."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from service.cli import main
from service.fixes.examples import run_recipe_examples
from service.packs.fixes import FixPack

RULES = Path(__file__).resolve().parents[2] / "rules"


def test_every_recipe_carries_an_example(pack: FixPack) -> None:
    assert [r.id for r in pack.recipes if not r.examples] == []


def test_recipe_examples_propose_exactly_the_promised_change(pack: FixPack) -> None:
    failures = [r.describe() for r in run_recipe_examples(pack) if not r.passed]
    assert failures == []


def test_a_wrong_expectation_is_reported(pack: FixPack) -> None:
    recipe = pack.recipes[0]
    wrong = msgspec.structs.replace(
        recipe, examples=[msgspec.structs.replace(recipe.examples[0], expect="--something-else")]
    )
    broken = msgspec.structs.replace(pack, recipes=(wrong,))
    [result] = [r for r in run_recipe_examples(broken) if r.index == 0]
    assert not result.passed
    assert "expected '--something-else'" in result.describe()


def test_rules_test_command_runs_the_recipe_examples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    kv = rules / "fixes" / "kv.yaml"
    kv.write_text(kv.read_text().replace("expect: --max-model-len 1344", "expect: --max-model-len 2048"))
    assert main(["rules", "test", "--rules-dir", str(rules)]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL fix lower-max-model-len example 0: expected '--max-model-len 2048', got '--max-model-len 1344'"
        in out
    )
