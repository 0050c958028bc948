"""Known logging bugs: figures vLLM itself printed wrong or in a misleading unit (`rules/misleading.yaml`).

Each entry names the fact, the rules whose line states it, the releases that printed it so, an
optional wording the line must show (the misleading unit) and rules that must also have matched
(the model layout the bug needs), and where the bug is documented. A flagged figure stays in the
facts as stated; unless `usable`, the budget and the fixes do not compute with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import re2

from service.errors import PackError
from service.packs.loader import load_yaml_file
from service.packs.signatures import FACT_TYPES, OPTIONS
from service.versions import VersionRange

__all__ = ["LoggingBug", "LoggingBugs", "load_misleading"]


class LoggingBug(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: str
    fact: str
    rules: list[str]
    versions: VersionRange
    wording: str | None = None  # RE2 the stating line must match (e.g. the mislabelled unit)
    when: list[str] = msgspec.field(default_factory=list)  # rule ids, one of which must also match
    usable: bool = False  # only the label misleads: the figure, read as vramdoc reads it, is right
    # the wording exists only in the bug's releases (read in the sources): a log of unknown version
    # that shows it is of those releases
    dated_by_wording: bool = False
    # facts the stating line derives from the figure (a rule's `also`): never taken from that line
    implied: list[str] = msgspec.field(default_factory=list)
    note: str
    source: str

    def __post_init__(self) -> None:
        if self.fact not in FACT_TYPES:
            raise ValueError(f"unknown fact {self.fact!r} (DESIGN §3.2 names the facts)")
        if not self.rules:
            raise ValueError("a logging bug names the rules whose line states the figure")
        if self.dated_by_wording and self.wording is None:
            raise ValueError("dated_by_wording needs the wording that dates the log")
        for name in self.implied:
            if name not in FACT_TYPES:
                raise ValueError(f"unknown implied fact {name!r} (DESIGN §3.2 names the facts)")


class _File(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    bugs: list[LoggingBug]


class LoggingBugs(msgspec.Struct, frozen=True):
    """The bugs, each with its `wording` compiled (None when any wording of its rules counts)."""

    bugs: tuple[tuple[LoggingBug, Any], ...]


def load_misleading(rules_dir: Path, rule_ids: Mapping[str, object]) -> LoggingBugs:
    """Decode `rules_dir/misleading.yaml`; unknown rule ids and bad wordings are PackErrors."""
    shown = "misleading.yaml"
    loaded = load_yaml_file(rules_dir / shown, _File, root=rules_dir)
    bugs: list[tuple[LoggingBug, Any]] = []
    seen: set[str] = set()
    for bug in loaded.bugs:
        if bug.id in seen:
            raise PackError(shown, "bug id defined twice", rule_id=bug.id)
        seen.add(bug.id)
        unknown = [rule for rule in (*bug.rules, *bug.when) if rule not in rule_ids]
        if unknown:
            raise PackError(shown, f"names unknown rule(s) {', '.join(unknown)}", rule_id=bug.id)
        wording = None
        if bug.wording is not None:
            try:
                wording = re2.compile(bug.wording, OPTIONS)
            except re2.error as exc:
                raise PackError(shown, f"wording {bug.wording!r} is not RE2 ({exc})", rule_id=bug.id) from exc
        bugs.append((bug, wording))
    return LoggingBugs(bugs=tuple(bugs))
