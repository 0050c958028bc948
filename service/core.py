"""The pure core facade every shell calls: classify and diagnose a log (DESIGN §2).

No web framework, Slack, Redis or HTTP client is imported here or below; a test proves it.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from service.budget import budget_from_facts, find_gpu, find_model, in_catalog
from service.budget import estimate as estimate_budget
from service.diagnosis import classify_text
from service.diagnosis.misleading import arithmetic_facts
from service.errors import EmptyLogError, InputError
from service.fingerprints import fingerprint
from service.fixes import check_calculators, replace_facts, snapshot_gpu_facts
from service.fixes.diagnosis import with_fixes
from service.packs import RulePacks, load_packs
from service.preflight import launch_model, preflight
from service.schemas import (
    Budget,
    DiagnoseRequest,
    Diagnosis,
    EstimateRequest,
    Facts,
    FigureSource,
    Finding,
    VllmServer,
)

__all__ = ["classify", "diagnose", "estimate", "launch_model", "load_rules", "preflight"]

MAX_LOG_CHARS = 64 * 2**20


def load_rules(rules_dir: Path | None = None) -> RulePacks:
    """The rule packs, loaded and checked against the code that uses them (calculator names).

    Every shell loads its rules here; a malformed pack raises PackError naming file, rule and field.
    """
    packs = load_packs(rules_dir)
    check_calculators(packs.fixes)
    return packs


def _request_facts(request: DiagnoseRequest) -> dict[str, object]:
    facts: dict[str, object] = {}
    if request.model:
        facts["model"] = request.model.strip()
    if request.gpu:
        facts["gpu_name"] = request.gpu.strip()
    if request.vllm_version:
        facts["vllm_version"] = request.vllm_version.strip()
    return facts


def classify(request: DiagnoseRequest, packs: RulePacks) -> Diagnosis:
    """Phase, facts, evidence and findings of a pasted log (budget None, fixes [])."""
    if not request.log.strip():
        raise EmptyLogError("The log is empty: paste the vLLM output that shows the failure.")
    log = request.log[:MAX_LOG_CHARS]
    return classify_text(
        log,
        packs,
        request_facts=_request_facts(request),
        command=request.command,
        vllm_version=request.vllm_version.strip() if request.vllm_version else None,
    )


def _budget_facts(diagnosis: Diagnosis) -> Facts:
    """The facts the budget may take as startup state.

    An OOM's "X is free" is what was left at the moment of the failure, after weights and cache were
    allocated; fed to the startup check it would claim vLLM never started, so it is left out. So
    is a figure a known vLLM logging bug makes misleading (`Diagnosis.misleading`).
    """
    facts = arithmetic_facts(diagnosis)
    source = diagnosis.fact_sources.get("free_gib", "")
    if not source.startswith("line "):
        return facts
    line = int(source.removeprefix("line "))
    stated_by_oom = any(
        item.line == line and ((item.rule or "").startswith("torch-") or "out of memory" in item.text.lower())
        for item in diagnosis.evidence
    )
    return msgspec.structs.replace(facts, free_gib=None) if stated_by_oom else facts


def _unknown_hints(
    request: DiagnoseRequest, diagnosis: Diagnosis, packs: RulePacks, budget: Budget | None
) -> list[Finding]:
    """A model or GPU hint the catalog does not know, said once, with the closest names."""
    findings: list[Finding] = []
    checks = (
        (request.model, lambda name: find_model(packs.catalog, name)),
        (request.gpu, lambda name: find_gpu(packs.catalog, name, None)),
    )
    consequence = (
        "Without it there is no memory budget for this log."
        if budget is None
        else f"The budget uses the {budget.total_gib:g} GiB GPU the log states instead."
    )
    for hint, lookup in checks:
        if not hint or not hint.strip():
            continue
        try:
            lookup(hint.strip())
        except InputError as exc:
            findings.append(
                Finding(
                    rule="request-hint-unknown",
                    phase=diagnosis.phase,
                    severity="warning",
                    message=f"{exc} {consequence}",
                )
            )
    return findings


def _served_model(request: DiagnoseRequest, name: str | None) -> VllmServer | None:
    """The snapshot's vLLM server that serves `name` with its config.json read from disk."""
    if request.snapshot is None or not name:
        return None
    wanted = name.strip().rstrip("/")
    for server in request.snapshot.vllm:
        if server.model_config is not None and wanted in (server.model, server.model_path):
            return server
    return None


def _budget(request: DiagnoseRequest, diagnosis: Diagnosis, packs: RulePacks) -> tuple[Budget | None, bool]:
    """The budget, and whether the model came from a host's agent (a model the catalog lacks)."""
    facts = _budget_facts(diagnosis)
    name = facts.model or request.model
    served = None if name is None or in_catalog(packs.catalog, name) else _served_model(request, name)
    if served is None:
        return budget_from_facts(facts, packs.catalog), False
    budget = budget_from_facts(
        facts, packs.catalog, config=served.model_config, parameters=served.model_parameters
    )
    if budget is None or request.snapshot is None:
        return budget, budget is not None
    source = FigureSource(
        kind="given", note=f"config.json the agent on {request.snapshot.host} read from disk"
    )
    return msgspec.structs.replace(budget, sources={**budget.sources, "model": source}), True


def _on_snapshot_gpu(diagnosis: Diagnosis, request: DiagnoseRequest, packs: RulePacks) -> Diagnosis:
    """The host snapshot's GPU as the log's, when the log (and the hints) name none."""
    changes = snapshot_gpu_facts(
        diagnosis.phase, diagnosis.facts, request.snapshot, request.command, packs.fixes
    )
    if not changes:
        return diagnosis
    sources = {**diagnosis.fact_sources, **dict.fromkeys(changes, "snapshot")}
    return msgspec.structs.replace(
        diagnosis, facts=replace_facts(diagnosis.facts, changes), fact_sources=sources
    )


def diagnose(request: DiagnoseRequest, packs: RulePacks) -> Diagnosis:
    """The full diagnosis: classification, the budget when model and GPU are known, ranked fixes, and
    the fingerprint team memory recognises it by."""
    diagnosis = _on_snapshot_gpu(classify(request, packs), request, packs)
    budget, from_agent = _budget(request, diagnosis, packs)
    hints = request if not from_agent else msgspec.structs.replace(request, model=None)
    findings = diagnosis.findings + _unknown_hints(hints, diagnosis, packs, budget)
    diagnosis = msgspec.structs.replace(diagnosis, budget=budget, findings=findings)
    # the fixes compute with the facts a logging bug does not make misleading; the answer keeps all
    computed = with_fixes(
        msgspec.structs.replace(diagnosis, facts=arithmetic_facts(diagnosis)),
        request,
        packs.fixes,
        packs.catalog,
    )
    diagnosis = msgspec.structs.replace(computed, facts=diagnosis.facts)
    return msgspec.structs.replace(diagnosis, fingerprint=fingerprint(diagnosis, packs))


def estimate(request: EstimateRequest, packs: RulePacks) -> Budget:
    """The per-GPU memory budget of a model, GPU and vLLM configuration (DESIGN §3.4)."""
    return estimate_budget(request, packs.catalog)
