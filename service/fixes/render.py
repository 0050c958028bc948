"""Plain-text rendering of ranked fixes for `vramdoc diagnose` (the JSON is the Fix structs as they are)."""

from __future__ import annotations

from collections.abc import Sequence

from service.schemas import Fix

__all__ = ["render_fixes"]


def render_fixes(fixes: Sequence[Fix], corrected_command: str | None = None) -> str:
    """The fixes as numbered, readable lines, then the corrected command when there is one."""
    if not fixes:
        return "Fixes: none to suggest for this failure."
    lines = ["Fixes, best first (change one thing at a time):"]
    for fix in fixes:
        lines.append(f"  {fix.rank}. {fix.title}")
        lines.append(f"     change:   {fix.change}")
        lines.append(f"     why:      {fix.why}")
        lines.append(f"     costs:    {fix.tradeoff}")
        if fix.source:
            lines.append(f"     from:     {', '.join(fix.source)}")
        if not fix.exact:
            needs = ", ".join(fix.needs) or "more facts"
            lines.append(f"     (no exact value: give {needs} for one)")
    if corrected_command:
        lines += ["", "Corrected command (top fix applied):", f"  {corrected_command}"]
    return "\n".join(lines)
