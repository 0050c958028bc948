"""Pre-flight: will this `vllm serve …` command start on that host, right now? (issue 16)

One command, one host's live state. The command is read by the one launch parser and its flags are
linted for the host's vLLM version (the request's, else the one the host's vLLM server reports, else
the newest, said so); the estimator sizes it with the host's GPUs and their current free memory (other
processes included), so the startup check is vLLM's own arithmetic; the predicted failure gets the
same ranked fixes and corrected command a pasted log of that failure would. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from service.budget import budget_from_facts, find_model
from service.diagnosis.command import parse_command
from service.errors import InputError
from service.fixes import FixRequest, corrected_command, first_command_fix, rank_fixes
from service.fixes.command import edit_of
from service.fixes.lookup import CatalogLookup
from service.launch import parse_launch
from service.packs import RulePacks
from service.schemas import (
    Budget,
    CommandIssue,
    Facts,
    Finding,
    Fix,
    GpuInfo,
    Phase,
    Preflight,
    PreflightOutcome,
    PreflightRequest,
    Snapshot,
)

VersionSource = Literal["request", "snapshot", "assumed"]

__all__ = ["launch_model", "preflight"]


class NoModelError(InputError):
    problem_type = "no-model"


class NoGpuError(InputError):
    problem_type = "no-gpu"


def _length(tokens: int) -> str:
    """32768 → `32k`, 131072 → `128k`, 20000 → `20,000`: lengths as people say them (k = 1024)."""
    return f"{tokens // 1024}k" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens:,}"


def _gib(value: float) -> str:
    """GiB as vLLM prints them in the startup check: two decimals, trailing zeros dropped."""
    return f"{round(value, 2):g}"


def _served_version(snapshot: Snapshot | None) -> str | None:
    versions = {s.version for s in snapshot.vllm if s.version} if snapshot is not None else set()
    return versions.pop() if len(versions) == 1 else None


def _used_gpus(snapshot: Snapshot, visible: str | None, count: int) -> list[GpuInfo]:
    """The GPUs the command would run on: CUDA_VISIBLE_DEVICES, else the first `count`."""
    by_index = {gpu.index: gpu for gpu in snapshot.gpus}
    if visible:
        named = [int(part) for part in visible.split(",") if part.strip().isdigit()]
        return [by_index[i] for i in named if i in by_index][:count]
    return sorted(snapshot.gpus, key=lambda gpu: gpu.index)[:count]


def _phase(budget: Budget) -> Phase | None:
    """The failure the budget predicts, in startup order; None when it starts."""
    if budget.startup_check.passes is False:
        return "startup_budget"
    if budget.weights_gib >= budget.total_gib:
        return "weights_oom"
    if not budget.fits:
        return "kv_cache_capacity"
    return None


def _outcome(phase: Phase | None, issues: Sequence[CommandIssue]) -> PreflightOutcome:
    if any(issue.severity == "error" for issue in issues):
        return "rejected"
    if phase is None:
        return "starts"
    return "refused" if phase == "startup_budget" else "fails"


def _is_action(fix: Fix) -> bool:
    edit = edit_of(fix.change)
    return edit is None or edit.remove_flag is not None


def _advice(fixes: Sequence[Fix]) -> str:
    """`; use --gpu-memory-utilization 0.76 or stop PID 4121 (…)`: the two best fixes, as actions."""
    said = [fix.change if _is_action(fix) else f"use {fix.change}" for fix in fixes[:2]]
    return f"; {' or '.join(said)}" if said else ""


def _verdict(
    outcome: PreflightOutcome, budget: Budget, issues: Sequence[CommandIssue], fixes: list[Fix]
) -> str:
    """One line: what happens and, when it does not start, what to do instead."""
    advice = _advice(fixes)
    if outcome == "rejected":
        rejected = "; ".join(issue.message.rstrip(".") for issue in issues if issue.severity == "error")
        return f"rejected before it loads anything: {rejected}{advice}"
    if outcome == "starts":
        return (
            f"starts: {budget.kv_cache_tokens:,} KV tokens, {budget.max_concurrency:.1f}× concurrency "
            f"at {_length(budget.max_model_len)}"
        )
    if outcome == "refused":
        check = budget.startup_check
        return (
            f"refused at the startup check: {_gib(check.free_gib or 0.0)} GiB free < "
            f"{budget.gpu_memory_utilization:g} × {_gib(budget.total_gib)} GiB{advice}"
        )
    return f"fails after loading: {budget.verdict.rstrip('.')}{advice}"


def _rejected_first(fixes: list[Fix], issues: Sequence[CommandIssue]) -> list[Fix]:
    """A fix that edits a flag vLLM rejects goes first: the argument parser fails before anything else."""
    flags = {issue.flag for issue in issues if issue.severity == "error"}

    def edits_rejected(fix: Fix) -> bool:
        edit = edit_of(fix.change)
        return edit is not None and bool(flags & {edit.remove_flag, *(flag for flag, _ in edit.settings)})

    ordered = sorted(fixes, key=lambda fix: not edits_rejected(fix))
    return [msgspec.structs.replace(fix, rank=rank) for rank, fix in enumerate(ordered, start=1)]


def _uncertain(
    request: PreflightRequest, budget: Budget, version_source: VersionSource, gpus: list[GpuInfo], needed: int
) -> list[str]:
    """What the answer assumes, so a person knows what would change it."""
    notes: list[str] = []
    if version_source == "assumed" and request.snapshot is not None:
        notes.append(f"No vLLM server on {request.snapshot.host} reports its version; give yours.")
    if request.snapshot is None:
        notes.append(
            "No live snapshot: the GPUs are assumed empty, so the startup check is not run; name a host "
            "whose agent is registered to use its current free memory."
        )
    else:
        notes.append(
            f"Free memory is what {request.snapshot.host}'s GPUs had at {request.snapshot.captured_at}; "
            "vLLM creates its CUDA context and NCCL buffers before it measures, which takes a few hundred "
            "MiB more."
        )
        if len(gpus) < needed:
            notes.append(
                f"The command needs {needed} GPUs and {request.snapshot.host} has {len(gpus)} usable."
            )
        check = budget.startup_check
        if check.passes is None and check.free_gib is not None:
            notes.append(
                f"vLLM {budget.vllm_version} runs no startup check: a busy GPU shows up later, as a "
                "smaller KV cache or an out-of-memory error."
            )
        elif check.free_gib is None:
            notes.append(
                "The snapshot's free memory does not fit this GPU's size, so no startup check was run."
            )
    estimated = budget.sources.get("available_kv_gib")
    if estimated is not None and estimated.kind == "estimated" and estimated.uncertainty_gib:
        notes.append(
            f"The activation peak, non-torch and CUDA-graph memory are estimates: the KV cache memory "
            f"is ± {estimated.uncertainty_gib:.2f} GiB."
        )
    return notes + list(budget.notes)


def _on_host(
    request: PreflightRequest, facts: Facts, visible: str | None, needed: int
) -> tuple[Facts, list[GpuInfo]]:
    """The facts with the GPU it would start on (the one with least free memory: every rank checks its
    own), and the GPUs it would use; or the named catalog GPU, assumed empty."""
    if request.snapshot is not None:
        gpus = _used_gpus(request.snapshot, visible, needed)
        if not gpus:
            raise NoGpuError(f"The snapshot of {request.snapshot.host} lists no GPU the command could use.")
        worst = min(gpus, key=lambda gpu: gpu.free_gib)
        return msgspec.structs.replace(
            facts, gpu_name=worst.name, total_gib=worst.total_gib, free_gib=worst.free_gib
        ), gpus
    if request.gpu:
        return msgspec.structs.replace(facts, gpu_name=request.gpu), []
    raise NoGpuError("Pre-flight needs a host's snapshot (or at least a GPU name) to size the command on.")


def _fixes(
    request: PreflightRequest,
    packs: RulePacks,
    phase: Phase | None,
    facts: Facts,
    budget: Budget,
    issues: Sequence[CommandIssue],
) -> list[Fix]:
    """The fixes a log of the predicted failure would get, a fix for a rejected flag first."""
    if phase is None and not issues:
        return []
    ranked_as: Phase = phase or "not_memory"
    findings = [Finding(rule=i.rule, phase=ranked_as, severity=i.severity, message=i.message) for i in issues]
    known = msgspec.structs.replace(
        facts, requested_gib=budget.requested_gib, estimated_max_model_len=budget.max_model_len_fit
    )
    fixes = rank_fixes(
        FixRequest(
            phase=ranked_as,
            facts=known,
            findings=findings,
            budget=budget,
            snapshot=request.snapshot,
            engine_version=budget.vllm_version,
            command=request.command,
            top=request.top,
        ),
        packs.fixes,
        CatalogLookup.for_catalog(packs.catalog),
    )
    return _rejected_first(fixes, issues)


def launch_model(request: PreflightRequest, packs: RulePacks) -> str | None:
    """The model the command serves (else the request's): what a shell resolves before a pre-flight."""
    named = parse_command(request.command, packs.fixes).facts.get("model")
    return named if isinstance(named, str) and named else request.model


def preflight(request: PreflightRequest, packs: RulePacks) -> Preflight:
    """Whether `request.command` starts on the snapshot's host now, why not, and the command that would."""
    version = request.vllm_version or _served_version(request.snapshot)
    version_source: VersionSource = (
        "request" if request.vllm_version else "snapshot" if version else "assumed"
    )
    parsed = parse_command(request.command, packs.fixes, version)
    issues = [
        CommandIssue(rule=i.rule, flag=i.flag, severity=i.severity, message=i.message) for i in parsed.issues
    ]
    facts = msgspec.convert(parsed.facts, Facts)
    model = facts.model or request.model
    if not model:
        raise NoModelError("The command names no model: give it as `vllm serve <model> …` or `--model`.")
    needed = max(
        1,
        (facts.tensor_parallel_size or 1)
        * (facts.pipeline_parallel_size or 1)
        * (facts.data_parallel_size or 1),
    )
    visible = parse_launch(request.command, packs.fixes.aliases).env_value("CUDA_VISIBLE_DEVICES")
    facts, gpus = _on_host(request, facts, visible, needed)
    budget = budget_from_facts(
        facts,
        packs.catalog,
        model=model,
        vllm_version=version,
        config=request.config,
        parameters=request.parameters,
        strict=True,
    )
    if budget is None:
        find_model(packs.catalog, model)  # raises the unknown-model error with the closest names
        raise NoModelError(f"{model} cannot be sized on {facts.gpu_name}.")
    phase = "parallelism_config" if request.snapshot is not None and len(gpus) < needed else _phase(budget)
    fixes = _fixes(request, packs, phase, facts, budget, issues)
    fix = first_command_fix(fixes)
    outcome = _outcome(phase, issues)
    return Preflight(
        outcome=outcome,
        phase=phase,
        verdict=_verdict(outcome, budget, issues, fixes),
        host=request.snapshot.host if request.snapshot is not None else None,
        gpus=[gpu.index for gpu in gpus],
        vllm_version=budget.vllm_version,
        version_source=version_source,
        issues=issues,
        budget=budget,
        fixes=fixes,
        corrected_command=corrected_command(request.command, fix, packs.fixes) if fix is not None else None,
        uncertain=_uncertain(request, budget, version_source, gpus, needed),
    )
