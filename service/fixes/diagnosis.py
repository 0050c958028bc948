"""Attaching ranked fixes to a Diagnosis: the one call `core.diagnose` makes into this package.

Apart from `service.fixes` itself because it reaches the budget's estimator (through
`service.fixes.lookup`), which ranking on its own does not need.
"""

from __future__ import annotations

import msgspec

from service.fixes import FixRequest, corrected_command, first_command_fix, rank_fixes
from service.fixes.lookup import CatalogLookup
from service.packs.catalog import Catalog
from service.packs.fixes import FixPack
from service.schemas import DiagnoseRequest, Diagnosis

__all__ = ["with_fixes"]


def with_fixes(
    diagnosis: Diagnosis, request: DiagnoseRequest, pack: FixPack, catalog: Catalog | None
) -> Diagnosis:
    """The diagnosis with its ranked fixes and, when the command is known, the corrected command."""
    fixes = rank_fixes(
        FixRequest(
            phase=diagnosis.phase,
            facts=diagnosis.facts,
            findings=diagnosis.findings,
            budget=diagnosis.budget,
            snapshot=request.snapshot,
            engine_version=diagnosis.engine.version,
            command=request.command,
            top=request.top,
            fact_sources=diagnosis.fact_sources,
            version_range=diagnosis.engine.range,
            evidence=[item.text for item in diagnosis.evidence if item.rule],
        ),
        pack,
        CatalogLookup.for_catalog(catalog) if catalog is not None else None,
    )
    corrected = None
    if request.command and (fix := first_command_fix(fixes)) is not None:
        corrected = corrected_command(request.command, fix, pack)
    return msgspec.structs.replace(diagnosis, fixes=fixes, corrected_command=corrected)
