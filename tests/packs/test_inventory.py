"""The message inventory (rules/inventory/) agrees with the signature rules.

Each relevant template is rendered with placeholder values of its holes' shapes and run through the
rules as the scanner runs them: a template nobody decided on, a recorded rule that no longer matches,
or a known gap a rule now matches fails. Each rule's own examples must include every wording (era) of
the templates mapped to it.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from service.packs import RulePacks, default_rules_dir, load_packs
from service.packs.inventory import Template, load_inventories, render, rules_matching, template_regex

_INVENTORIES = load_inventories(default_rules_dir())
_TEMPLATES = [(name, t) for name, inv in _INVENTORIES.items() for t in inv.templates]
_PACKS = load_packs()


def _id(item: tuple[str, Template]) -> str:
    name, template = item
    return f"{name}:{template.file}:{template.function}:{template.text[:40]}"


def test_inventories_load_and_the_generated_one_is_there() -> None:
    assert {"vllm.yaml", "torch.yaml", "plugins.yaml"} <= set(_INVENTORIES)
    vllm = _INVENTORIES["vllm.yaml"]
    assert len(vllm.releases) >= 30
    assert sum(vllm.irrelevant.values()) > len(vllm.templates)


@pytest.mark.parametrize("item", _TEMPLATES, ids=[_id(i) for i in _TEMPLATES])
def test_relevant_template_is_decided_and_matched(packs: RulePacks, item: tuple[str, Template]) -> None:
    _, template = item
    decision = template.decision
    assert not decision.is_open(), f"relevant template with no rule and no recorded gap: {render(template)!r}"
    found = rules_matching(packs.signatures.rules, template)
    if decision.rules:
        missing = sorted(set(decision.rules) - set(found))
        assert not missing, f"{missing} no longer match {render(template)!r} (they match: {found})"
    elif decision.gap:
        assert not found, f"known gap is now matched by {found}: record the rules instead"


# The plugins' and forks' inventory (tools/vllm_templates.py --plugins) reuses vLLM's rules for the same
# meaning; each of its templates is held to its rules by the test above, while the rules' own examples
# show vLLM's eras (a fork's renamed environment variables are not eras of vLLM's wording).
_OWN_WORDINGS = ("vllm.yaml", "torch.yaml")


def _wordings_by_rule() -> dict[str, list[Template]]:
    by_rule: dict[str, dict[str, Template]] = defaultdict(dict)
    for name, template in _TEMPLATES:
        if name not in _OWN_WORDINGS:
            continue
        for rule_id in template.decision.rules:
            by_rule[rule_id].setdefault(template.text.split("\n", 1)[0], template)
    return {rule_id: list(wordings.values()) for rule_id, wordings in sorted(by_rule.items())}


_BY_RULE = _wordings_by_rule()


@pytest.mark.parametrize("rule_id", list(_BY_RULE))
def test_rule_examples_include_each_era_of_its_wording(packs: RulePacks, rule_id: str) -> None:
    compiled = packs.signatures.by_id[rule_id]
    if compiled.rule.kind in ("info", "stage", "version"):
        # one fact line may sit inside many wordings (the capacity sentence of every allocator);
        # the decisive rules are the ones whose examples must show each era
        pytest.skip("fact and stage rules read a part of many wordings")
    lines = [example.line for example in compiled.rule.examples.match]
    missing = [t.text for t in _BY_RULE[rule_id] if not any(template_regex(t).search(line) for line in lines)]
    assert not missing, f"{rule_id} has no example of these wordings:\n" + "\n".join(missing)


def test_a_rule_that_stops_matching_is_reported(packs: RulePacks) -> None:
    template = Template(
        text="No available memory for the cache blocks.",
        level="raise",
        exception="ValueError",
        file="vllm/worker/worker.py",
        function="raise_if_cache_size_invalid",
        versions=[["0.2.7", "0.10.2"]],
    )
    assert "vllm-kv-no-cache-blocks" in rules_matching(packs.signatures.rules, template)
    unrelated = Template(
        text="Tokenizer {} not found.", holes=["text"], level="raise", file="f.py", function="f", versions=[]
    )
    assert rules_matching(packs.signatures.rules, unrelated) == []
