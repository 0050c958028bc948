"""Flagging figures a known vLLM logging bug makes misleading (`rules/misleading.yaml`).

A fact is flagged when the line it came from matched one of the bug's rules (in the bug's wording,
when it names one), the log's version is wholly inside the bug's releases (the stated or given
version, else every end of the range its wordings allow; an unknown version is taken as the newest
release, so a fixed bug is not assumed), and, when the bug needs a model layout, a rule showing it
matched too. The fact stays as printed; `arithmetic_facts` is what the budget and fixes compute with.
"""

from __future__ import annotations

import msgspec

from service.diagnosis.scan import Hit
from service.packs.misleading import LoggingBugs
from service.schemas import Diagnosis, Engine, Facts, MisleadingFact
from service.versions import parse_span

__all__ = ["arithmetic_facts", "flag_misleading", "implied_by_flagged"]


def flag_misleading(
    bugs: LoggingBugs, hits: list[Hit], sources: dict[str, str], engine: Engine
) -> list[MisleadingFact]:
    """The stated facts a known logging bug makes misleading in this log."""
    span = parse_span(engine.version, engine.range)
    matched = {hit.rule_id for hit in hits}
    flagged: list[MisleadingFact] = []
    for bug, wording in bugs.bugs:
        source = sources.get(bug.fact, "")
        if not source.startswith("line "):
            continue
        number = int(source.removeprefix("line "))
        stating = [
            hit
            for hit in hits
            if hit.line.number == number and hit.rule_id in bug.rules and bug.fact in hit.facts
        ]
        if not stating or (wording is not None and not any(wording.search(h.line.text) for h in stating)):
            continue
        dated = bug.dated_by_wording and engine.version is None and engine.range is None
        if not dated and not all(bug.versions.contains(version) for version in span):
            continue
        if bug.when and not matched.intersection(bug.when):
            continue
        flagged.append(
            MisleadingFact(fact=bug.fact, bug=bug.id, note=bug.note, source=bug.source, usable=bug.usable)
        )
    return flagged


def arithmetic_facts(diagnosis: Diagnosis) -> Facts:
    """The facts the budget and the fixes may compute with: a misleading figure is left out."""
    dropped = {item.fact: None for item in diagnosis.misleading if not item.usable}
    return msgspec.structs.replace(diagnosis.facts, **dropped) if dropped else diagnosis.facts


def implied_by_flagged(
    bugs: LoggingBugs, flagged: list[MisleadingFact], sources: dict[str, str]
) -> set[tuple[int, str]]:
    """(line, fact) of the facts a flagged figure's line derives from it (its bug's `implied`): the
    line states the figure, not those, so another line or the command states them instead."""
    by_id = {bug.id: bug for bug, _ in bugs.bugs}
    out: set[tuple[int, str]] = set()
    for item in flagged:
        bug = by_id.get(item.bug)
        source = sources.get(item.fact, "")
        if bug is None or item.usable or not source.startswith("line "):
            continue
        out.update((int(source.removeprefix("line ")), name) for name in bug.implied)
    return out
