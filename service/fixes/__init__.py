"""Ranked fixes with exact values: the answer a person acts on (DESIGN §3.3 `fixes`, §4).

    rank_fixes(FixRequest(phase=…, facts=…, …), pack, catalog) -> list[Fix]
    corrected_command(command, fix, pack) -> str
    first_command_fix(fixes) -> Fix | None
    snapshot_gpu_facts(phase, facts, snapshot, command, pack) -> the host GPU's facts a log lacks
    check_calculators(pack)  raises PackError for a recipe naming no known calculator
    service.fixes.diagnosis.with_fixes(diagnosis, request, pack, catalog) -> Diagnosis
        (what core.diagnose calls; kept out of this module because it reaches the budget)

Pure: no I/O. Recipes come from `rules/fixes/` (service.packs.fixes); values from the calculators.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.fixes import command as _command
from service.fixes.calculators import check_calculators
from service.fixes.context import Catalog
from service.fixes.rank import FixRequest, rank_fixes, replace_facts, snapshot_gpu_facts
from service.packs.fixes import FixPack
from service.schemas import Fix

__all__ = [
    "Catalog",
    "FixRequest",
    "check_calculators",
    "corrected_command",
    "first_command_fix",
    "rank_fixes",
    "replace_facts",
    "snapshot_gpu_facts",
]


def corrected_command(command: str, fix: Fix, pack: FixPack) -> str:
    """The user's command with `fix` applied, one line, ready to paste (unchanged for an action).

    `pack` gives the flag history's aliases, so `-tp 4` is replaced by `--tensor-parallel-size 2`.
    """
    return _command.corrected_command(command, fix.change, pack.aliases)


def first_command_fix(fixes: Sequence[Fix]) -> Fix | None:
    """The best-ranked fix that edits the command (an action such as stopping a process does not)."""
    return next((fix for fix in fixes if _command.edit_of(fix.change) is not None), None)
