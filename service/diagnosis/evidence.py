"""Evidence and findings: what a person needs to see to trust the verdict, secrets redacted.

Evidence is the decisive lines, the lines the key facts came from, and the first exception with
up to 30 lines before it (its traceback); a line that reads the same as one already shown is counted
on that one instead. Only shown lines are redacted. Findings list every failure-type hit once per
rule, and say when the scan stopped at its bound.
"""

from __future__ import annotations

import hashlib

from service.diagnosis.command import FlagIssue
from service.diagnosis.interpret import Verdict
from service.diagnosis.normalize import Document
from service.diagnosis.scan import Hit, Scan
from service.redact import redact
from service.schemas import Evidence, Finding

__all__ = ["SCAN_BOUND_RULE", "collect_evidence", "collect_findings"]

CONTEXT_BEFORE = 30
MAX_TEXT = 2000
MAX_FINDINGS = 40
MAX_FACT_LINES = 8

# A shown line's redaction follows from its text alone, and the lines a failure shows (its traceback,
# the OOM message, the startup lines its facts come from) come back request after request: each is
# scrubbed once while it is remembered. Keyed by a digest of the raw line, so no secret a line held
# outlives its request in the table; bounded (a few MB at most), started over when full.
_REDACTED_BOUND = 2048
_redacted: dict[bytes, str] = {}


def _redacted_line(text: str) -> str:
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    known = _redacted.get(key)
    if known is None:
        if len(_redacted) >= _REDACTED_BOUND:
            _redacted.clear()
        known = _redacted[key] = redact(text)
    return known


def collect_evidence(
    doc: Document, verdict: Verdict, hits: list[Hit], fact_sources: dict[str, str]
) -> list[Evidence]:
    """Decisive lines, the lines the facts came from, and the first exception's context, in order."""
    chosen: dict[int, str | None] = {}
    for hit in verdict.decisive[:5]:
        chosen[hit.line.number] = hit.rule_id
    if verdict.root is not None:
        chosen[verdict.root.line.number] = verdict.root.rule_id
    sourced = sorted({int(s.split()[1]) for s in fact_sources.values() if s.startswith("line ")})
    for number in sourced[:MAX_FACT_LINES]:
        chosen.setdefault(number, None)
    exception = verdict.first_exception
    if exception is not None:
        line = exception.line
        chosen.setdefault(line.number, exception.rule_id)
        for before in doc.span(line.number - CONTEXT_BEFORE, line.number - 1):
            if not line.source or before.source == line.source:
                chosen.setdefault(before.number, None)
    by_line = {h.line.number: h.rule_id for h in hits}
    evidence: list[Evidence] = []
    shown: set[str] = set()
    repeats = _repeats(hits)
    for number in sorted(chosen):
        text = doc.line(number).text
        if not text.strip() or text in shown:
            continue
        shown.add(text)
        rule = chosen[number] or by_line.get(number)
        count = repeats.get(text, 1)
        evidence.append(Evidence(line=number, text=_redacted_line(text[:MAX_TEXT]), rule=rule, repeats=count))
    return evidence


def _repeats(hits: list[Hit]) -> dict[str, int]:
    """How many matched lines read each message (a line with several hits counts once)."""
    counts: dict[str, int] = {}
    seen: set[int] = set()
    for hit in hits:
        if hit.line.number not in seen:
            seen.add(hit.line.number)
            counts[hit.line.text] = counts.get(hit.line.text, 0) + hit.repeats
    return counts


SCAN_BOUND_RULE = "vramdoc-scan-bound"


def collect_findings(
    verdict: Verdict, found: Scan, flag_issues: list[tuple[FlagIssue, int | None]], total_lines: int
) -> list[Finding]:
    """One finding per (rule, phase): failures, OOMs, wrappers, the root, and bad flags; first, when
    the scan stopped at its bound, how far it read."""
    hits = found.hits
    findings: list[Finding] = []
    if found.stopped_at is not None:
        message = (
            f"Examined the first {found.examined} matching lines (up to line {found.stopped_at - 1} of "
            f"{total_lines}); the rest of the log was not read."
        )
        findings.append(
            Finding(
                rule=SCAN_BOUND_RULE,
                phase=verdict.phase,
                severity="warning",
                line=found.stopped_at,
                message=message,
            )
        )
    seen: set[tuple[str, str]] = set()
    for hit in hits:
        rule = hit.compiled.rule
        is_root = verdict.root is not None and hit is verdict.root
        if hit.line.number in verdict.taken_back:
            continue  # the person said this failure is gone or avoided
        if rule.kind not in ("failure", "oom", "wrapper") and not is_root:
            continue
        if rule.kind == "wrapper" or rule.kind == "exception":
            phase = verdict.phase
        else:
            phase = verdict.hit_phases.get((hit.line.number, hit.rule_id), rule.phase or verdict.phase)
        key = (hit.rule_id, phase)
        if key in seen:
            continue
        seen.add(key)
        findings.append(
            Finding(
                rule=hit.rule_id,
                phase=phase,
                severity=rule.severity,
                line=hit.line.number,
                message=rule.title,
            )
        )
    for issue, line in flag_issues:
        key = (issue.rule + issue.flag, "not_memory")
        if key in seen:
            continue
        seen.add(key)
        findings.append(
            Finding(
                rule=issue.rule, phase="not_memory", severity=issue.severity, line=line, message=issue.message
            )
        )
    return findings[:MAX_FINDINGS]
