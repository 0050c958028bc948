"""Running every rule's own examples (Sigma/Semgrep style): lines it must match, with their facts,
and lines it must not match. Used by `vramdoc rules test` and the test suite alike."""

from __future__ import annotations

import math

import msgspec

from service.diagnosis.normalize import Document
from service.diagnosis.scan import scan
from service.packs import RulePacks
from service.packs.signatures import CompiledRule

__all__ = ["ExampleFailure", "check_rule", "check_examples"]


class ExampleFailure(msgspec.Struct, frozen=True):
    rule: str
    file: str
    line: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file} rule {self.rule}: {self.problem}\n    line: {self.line[:160]}"


def _same(expected: object, actual: object) -> bool:
    if isinstance(expected, float | int) and isinstance(actual, float) and not isinstance(expected, bool):
        return math.isclose(float(expected), actual, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            _same(e, a) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_same(expected[k], actual[k]) for k in expected)
    if (
        isinstance(expected, str | int | float)
        and not isinstance(actual, bool)
        and not isinstance(expected, bool)
    ):
        return str(expected) == str(actual)
    return bool(expected == actual)


def _facts_of(packs: RulePacks, compiled: CompiledRule, line: str) -> dict[str, object] | None:
    """Facts this rule yields on `line` when run through the real scanner (prefilter included)."""
    doc = Document(line)
    for hit in scan(doc, packs.signatures.eager) + scan(doc, packs.signatures.lazy):
        if hit.compiled is compiled:
            facts = {k: v for k, v in hit.facts.items() if k != "command"}
            return dict(msgspec.to_builtins(facts))
    return None


def check_rule(packs: RulePacks, compiled: CompiledRule) -> list[ExampleFailure]:
    """Every way this rule's examples fail (empty when they all hold)."""
    rule = compiled.rule
    failures: list[ExampleFailure] = []
    for example in rule.examples.match:
        facts = _facts_of(packs, compiled, example.line)
        if facts is None:
            failures.append(ExampleFailure(rule.id, compiled.file, example.line, "does not match"))
            continue
        if not _same(example.facts, facts):
            problem = f"facts {facts} differ from the expected {example.facts}"
            failures.append(ExampleFailure(rule.id, compiled.file, example.line, problem))
    for line in rule.examples.no_match:
        if _facts_of(packs, compiled, line) is not None:
            failures.append(ExampleFailure(rule.id, compiled.file, line, "matches a line it must not match"))
    return failures


def check_examples(packs: RulePacks) -> list[ExampleFailure]:
    """Failures of every active rule's examples, in load order."""
    failures: list[ExampleFailure] = []
    for compiled in packs.signatures.rules:
        failures.extend(check_rule(packs, compiled))
    return failures
