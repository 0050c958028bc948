"""Loading fix recipes: the repository's pack is valid, and every malformed recipe names its place."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from service.errors import PackError
from service.fixes.calculators import CALCULATORS, check_calculators
from service.packs import RulePacks
from service.packs.fixes import FixPack, load_fix_recipes
from service.schemas import Finding

RULES = Path(__file__).resolve().parents[2] / "rules"

GOOD = """\
recipes:
  - id: lower-max-model-len
    title: Lower --max-model-len
    phases: [kv_cache_capacity]
    calculator: fit_max_model_len
    flags: [--max-model-len]
    tradeoff: Shorter requests only.
    rank: 10
"""


def _rules(tmp_path: Path, recipes: str) -> Path:
    folder = tmp_path / "rules" / "fixes"
    folder.mkdir(parents=True)
    shutil.copy(RULES / "fixes" / "flags.yaml", folder / "flags.yaml")
    (tmp_path / "rules" / "catalog").mkdir()
    shutil.copy(RULES / "catalog" / "engines.yaml", tmp_path / "rules" / "catalog" / "engines.yaml")
    (folder / "kv.yaml").write_text(recipes, encoding="utf-8")
    return tmp_path / "rules"


def test_repository_pack_uses_only_registered_calculators_and_known_flags(pack: FixPack) -> None:
    assert {r.calculator for r in pack.recipes} <= set(CALCULATORS)
    assert all(flag in pack.flags for r in pack.recipes for flag in r.flags)
    assert len({r.id for r in pack.recipes}) == len(pack.recipes)


def test_every_calculator_is_used_by_a_recipe(pack: FixPack) -> None:
    assert set(CALCULATORS) == {r.calculator for r in pack.recipes}


def test_every_diagnosable_failure_phase_has_a_recipe(pack: FixPack) -> None:
    served = {p for r in pack.recipes for p in r.phases}
    for phase in (
        "startup_budget",
        "weights_oom",
        "kv_cache_capacity",
        "warmup_oom",
        "runtime_oom",
        "kv_preemption",
        "request_too_long",
        "profiling_inconsistent",
        "parallelism_config",
        "quantization_config",
        "dtype_unsupported",
    ):
        assert phase in served, phase


def test_the_rules_a_recipe_needs_or_refuses_are_signature_rules(packs: RulePacks) -> None:
    for recipe in packs.fixes.recipes:
        for rule in recipe.with_rules + recipe.without_rules:
            assert rule in packs.signatures.by_id, f"{recipe.id}: {rule} is no signature rule"


def test_a_recipe_serves_a_phase_only_as_its_findings_reached_it(pack: FixPack) -> None:
    allocation = next(r for r in pack.recipes if r.id == "lower-gpu-memory-utilization-for-kv-allocation")
    capacity = next(r for r in pack.recipes if r.id == "raise-gpu-memory-utilization")
    oom = [Finding(rule="torch-cuda-oom", phase="kv_cache_capacity", severity="error")]
    sized = [Finding(rule="vllm-kv-no-cache-blocks", phase="kv_cache_capacity", severity="error")]
    assert allocation.applies("kv_cache_capacity", oom) and not allocation.applies("kv_cache_capacity", sized)
    assert capacity.applies("kv_cache_capacity", sized) and not capacity.applies("kv_cache_capacity", oom)
    # an OOM finding of another phase does not count against a phase it did not reach
    elsewhere = [Finding(rule="torch-cuda-oom", phase="runtime_oom", severity="error")]
    assert capacity.applies("kv_preemption", elsewhere)


def test_a_minimal_recipe_file_loads(tmp_path: Path) -> None:
    loaded = load_fix_recipes(_rules(tmp_path, GOOD))
    assert [r.id for r in loaded.recipes] == ["lower-max-model-len"]


@pytest.mark.parametrize(
    ("bad", "good", "path", "reason"),
    [
        ("[kv_cache_capacity]", "[kv_capacity]", "$.recipes[0].phases[0]", "Invalid enum value"),
        ("[--max-model-len]", "[--max-seq-len]", "$.recipes[0].flags[0]", "not in flags.yaml"),
        ("rank: 10", "rank: 0", "$.recipes[0]", "rank must be between"),
        ("id: lower-max-model-len", "id: LowerMaxModelLen", "$.recipes[0]", "imperative kebab-case"),
        ("rank: 10", "rank: 10\n    needs: [kv_tokens]", "$.recipes[0].needs[0]", "not a fact name"),
        (
            "rank: 10",
            'rank: 10\n    versions: {introduced: "zero"}',
            "$.recipes[0].versions",
            "not a vLLM version",
        ),
        ("rank: 10", "rank: 10\n    action: edit", "$.recipes[0]", "either the flags"),
        (
            "rank: 10",
            "rank: 10\n    examples:\n      - facts: {max_len: 2048}\n        expect: null",
            "$.recipes[0].examples[0].facts",
            "unknown field `max_len`",
        ),
    ],
)
def test_malformed_recipe_names_file_recipe_path_and_line(
    tmp_path: Path, bad: str, good: str, path: str, reason: str
) -> None:
    with pytest.raises(PackError) as caught:
        load_fix_recipes(_rules(tmp_path, GOOD.replace(bad, good)))
    error = caught.value
    assert error.file == "rules/fixes/kv.yaml"
    assert error.path == path
    assert error.line is not None and 2 <= error.line <= 10
    assert reason in str(error)
    if "id:" not in good:
        assert error.rule_id == "lower-max-model-len"


def test_an_unknown_calculator_names_file_recipe_path_and_line(tmp_path: Path) -> None:
    """Packs are data and load without knowing the calculators; the fixes' check names the place."""
    loaded = load_fix_recipes(_rules(tmp_path, GOOD.replace("fit_max_model_len", "fit_max_model_lenn")))
    with pytest.raises(PackError) as caught:
        check_calculators(loaded)
    error = caught.value
    assert (error.file, error.path, error.line, error.rule_id) == (
        "rules/fixes/kv.yaml",
        "$.recipes[0].calculator",
        5,
        "lower-max-model-len",
    )
    assert "unknown calculator 'fit_max_model_lenn'" in str(error)


def test_duplicate_recipe_ids_are_rejected(tmp_path: Path) -> None:
    rules = _rules(tmp_path, GOOD)
    (rules / "fixes" / "more.yaml").write_text(GOOD, encoding="utf-8")
    with pytest.raises(PackError, match="already used in rules/fixes/kv.yaml"):
        load_fix_recipes(rules)


def test_a_folder_without_recipes_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="holds no fix recipes"):
        load_fix_recipes(_rules(tmp_path, "recipes: []\n"))


def test_retired_recipes_are_kept_in_yaml_but_not_offered(tmp_path: Path) -> None:
    text = GOOD + GOOD.split("recipes:\n")[1].replace("lower-max-model-len", "shorten-context").replace(
        "rank: 10", "rank: 10\n    status: retired"
    )
    loaded = load_fix_recipes(_rules(tmp_path, text))
    assert [r.id for r in loaded.recipes] == ["lower-max-model-len"]


def test_a_bad_flag_history_names_the_flag(tmp_path: Path) -> None:
    rules = _rules(tmp_path, GOOD)
    (rules / "fixes" / "flags.yaml").write_text(
        'flags:\n  - name: --max-model-len\n    versions: {introduced: "0.12.0", removed: "0.10.0"}\n',
        encoding="utf-8",
    )
    with pytest.raises(PackError, match=r"rules/fixes/flags.yaml:3 .*removed must be a later release"):
        load_fix_recipes(rules)
