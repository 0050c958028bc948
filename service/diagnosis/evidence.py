"""Evidence and findings: what a person needs to see to trust the verdict, secrets redacted.

Evidence is the decisive lines, the lines the key facts came from, and the first exception with
up to 30 lines before it (its traceback). Findings list every failure-type hit once per rule.
"""

from __future__ import annotations

from service.diagnosis.command import FlagIssue
from service.diagnosis.interpret import Verdict
from service.diagnosis.normalize import Document
from service.diagnosis.scan import Hit
from service.redact import redact
from service.schemas import Evidence, Finding

__all__ = ["collect_evidence", "collect_findings"]

CONTEXT_BEFORE = 30
MAX_TEXT = 2000
MAX_FINDINGS = 40
MAX_FACT_LINES = 8


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
    evidence = []
    for number in sorted(chosen):
        text = doc.line(number).text
        if not text.strip():
            continue
        rule = chosen[number] or by_line.get(number)
        evidence.append(Evidence(line=number, text=redact(text[:MAX_TEXT]), rule=rule))
    return evidence


def collect_findings(
    verdict: Verdict, hits: list[Hit], flag_issues: list[tuple[FlagIssue, int | None]]
) -> list[Finding]:
    """One finding per (rule, phase): failures, OOMs, wrappers, the root, and bad flags."""
    findings: list[Finding] = []
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
