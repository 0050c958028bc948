"""Ranked fixes with exact values: the answer a person acts on (DESIGN §3.3 `fixes`, §4).

    rank_fixes(phase, facts, findings, budget, snapshot, version, pack, …) -> list[Fix]
    corrected_command(command, fix) -> str
    first_command_fix(fixes) -> Fix | None
    with_fixes(diagnosis, request, pack, catalog) -> Diagnosis   (what core.diagnose calls)

Pure: no I/O. Recipes come from `rules/fixes/` (service.packs.fixes); values from the calculators.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from service.fixes import command as _command
from service.fixes.context import Catalog
from service.fixes.lookup import CatalogLookup
from service.fixes.rank import rank_fixes
from service.packs.catalog import Catalog as BudgetCatalog
from service.schemas import DiagnoseRequest, Diagnosis, Fix

if TYPE_CHECKING:  # service.packs.fixes imports the calculators from this package
    from service.packs.fixes import FixPack

__all__ = ["Catalog", "corrected_command", "first_command_fix", "rank_fixes", "with_fixes"]


def corrected_command(command: str, fix: Fix) -> str:
    """The user's command with `fix` applied, one line, ready to paste (unchanged for an action)."""
    return _command.corrected_command(command, fix.change)


def first_command_fix(fixes: Sequence[Fix]) -> Fix | None:
    """The best-ranked fix that edits the command (an action such as stopping a process does not)."""
    return next((fix for fix in fixes if _command.edit_of(fix.change) is not None), None)


def with_fixes(
    diagnosis: Diagnosis, request: DiagnoseRequest, pack: FixPack, catalog: BudgetCatalog | None
) -> Diagnosis:
    """The diagnosis with its ranked fixes and, when the command is known, the corrected command."""
    fixes = rank_fixes(
        diagnosis.phase,
        diagnosis.facts,
        diagnosis.findings,
        diagnosis.budget,
        request.snapshot,
        diagnosis.engine.version,
        pack,
        catalog=CatalogLookup(catalog) if catalog is not None else None,
        command=request.command,
        top=request.top,
        fact_sources=diagnosis.fact_sources,
        version_range=diagnosis.engine.range,
        evidence=[item.text for item in diagnosis.evidence if item.rule],
    )
    corrected = None
    if request.command and (fix := first_command_fix(fixes)) is not None:
        corrected = corrected_command(request.command, fix)
    return msgspec.structs.replace(diagnosis, fixes=fixes, corrected_command=corrected)
