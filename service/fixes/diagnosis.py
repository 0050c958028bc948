"""Attaching ranked fixes to a Diagnosis: the one call `core.diagnose` makes into this package.

Apart from `service.fixes` itself because it reaches the budget's catalog and estimator, which the
rule packs import in turn; keeping it here keeps that import graph free of cycles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from service.fixes import corrected_command, first_command_fix, rank_fixes
from service.fixes.lookup import CatalogLookup
from service.schemas import DiagnoseRequest, Diagnosis

if TYPE_CHECKING:
    from service.packs.catalog import Catalog
    from service.packs.fixes import FixPack

__all__ = ["with_fixes"]


def with_fixes(
    diagnosis: Diagnosis, request: DiagnoseRequest, pack: FixPack, catalog: Catalog | None
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
