"""Running every recipe's own examples: the recipe must propose exactly the change it promises.

Used by the test suite and available to `vramdoc rules test`, so a recipe's YAML documents, by
example, what it answers.
"""

from __future__ import annotations

import msgspec

from service.fixes.rank import FixRequest, rank_fixes
from service.packs.fixes import FixPack, FixRecipe
from service.schemas import Phase

__all__ = ["ExampleResult", "run_recipe_examples"]


class ExampleResult(msgspec.Struct, frozen=True):
    recipe: str
    index: int
    expected: str | None
    got: str | None

    @property
    def passed(self) -> bool:
        return self.expected == self.got

    def describe(self) -> str:
        want = self.expected if self.expected is not None else "no fix"
        got = self.got if self.got is not None else "no fix"
        return f"fix {self.recipe} example {self.index}: expected {want!r}, got {got!r}"


def _first_phase(recipe: FixRecipe) -> Phase:
    for phase in recipe.phases:
        if phase != "any":
            return phase
    return "not_memory"


def run_recipe_examples(pack: FixPack) -> list[ExampleResult]:
    """Each example through the full ranking (version gates included); what its recipe proposed."""
    results: list[ExampleResult] = []
    for recipe in pack.recipes:
        for index, example in enumerate(recipe.examples):
            fixes = rank_fixes(
                FixRequest(
                    phase=example.phase or _first_phase(recipe),
                    facts=example.facts,
                    findings=example.findings,
                    snapshot=example.snapshot,
                    engine_version=example.version,
                    command=example.command,
                    top=50,
                    evidence=example.evidence,
                ),
                pack,
            )
            got = next((f.change for f in fixes if f.id == recipe.id), None)
            results.append(ExampleResult(recipe.id, index, example.expect, got))
    return results
