"""Ranking: every recipe that serves the phase proposes its change; the likeliest, cheapest come first.

Order is by `rank / likelihood`: the recipe's base rank says how well the fix usually works and how
little it costs; the calculator's likelihood says how well it fits these facts. Each fix is one
change; two fixes never change the same flag; no fix names a flag the user's version lacks, and no
fix sets a value the budget says cannot work (`_budget_allows`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import msgspec

from service.first_use import first_use_re
from service.fixes.calculators import CALCULATORS
from service.fixes.calculators.readings import said_text
from service.fixes.command import CommandEdit, ParsedCommand, edit_of, parse_command
from service.fixes.context import GIB, Catalog, FixContext, Proposal
from service.fixes.render import to_make_exact
from service.packs.derived import per_pack
from service.packs.fixes import FixPack, FixRecipe
from service.schemas import Budget, Facts, Finding, Fix, GpuInfo, Phase, Snapshot
from service.versions import VersionSpan, has_floor, parse_span

__all__ = ["FixRequest", "rank_fixes"]

_STARTUP_PHASES = frozenset(
    {"startup_budget", "weights_oom", "kv_cache_capacity", "warmup_oom", "profiling_inconsistent"}
)


def _pick_gpu(snapshot: Snapshot | None, facts: Facts, command: ParsedCommand | None) -> GpuInfo | None:
    """The snapshot GPU vLLM ran on: CUDA_VISIBLE_DEVICES, else the one matching the log, else GPU 0."""
    if snapshot is None or not snapshot.gpus:
        return None
    by_index = {g.index: g for g in snapshot.gpus}
    visible = command.env_value("CUDA_VISIBLE_DEVICES") if command is not None else None
    if visible:
        first = visible.split(",")[0].strip()
        if first.isdigit() and int(first) in by_index:
            return by_index[int(first)]
    if facts.total_gib is not None:
        same = [g for g in snapshot.gpus if abs(g.total_gib - facts.total_gib) < 0.5]
        if same and facts.free_gib is not None:
            free = facts.free_gib
            return min(same, key=lambda g: abs(g.free_gib - free))
    return by_index.get(0, snapshot.gpus[0])


def snapshot_gpu_facts(
    phase: Phase, facts: Facts, snapshot: Snapshot | None, command: str | None, pack: FixPack
) -> dict[str, object]:
    """The snapshot GPU's name, total and (a start-up failure) free memory for a log naming no GPU.

    Most V1 logs state neither the GPU nor its size; a diagnosis asked "on gpu-07" sizes its budget
    and records its calibration sample on the host's GPU instead of giving neither.
    """
    if facts.gpu_name is not None or facts.total_gib is not None:
        return {}
    parsed = parse_command(command, pack.aliases) if command else None
    gpu = _pick_gpu(snapshot, facts, parsed)
    if gpu is None or not gpu.total_gib > 0:
        return {}
    changes: dict[str, object] = {"gpu_name": gpu.name, "total_gib": gpu.total_gib}
    if phase in _STARTUP_PHASES and facts.free_gib is None and gpu.free_gib >= 0:
        changes["free_gib"] = gpu.free_gib
    return changes


def _merge_facts(
    phase: Phase,
    facts: Facts,
    sources: dict[str, str],
    gpu: GpuInfo | None,
    budget: Budget | None,
    catalog: Catalog | None,
    command: ParsedCommand | None,
) -> Facts:
    """Fill facts the log did not state from the snapshot, the budget, the catalog and the command."""
    filled: dict[str, object] = {}

    def fill(name: str, value: object, source: str) -> None:
        if value is not None and getattr(facts, name) is None and name not in filled:
            filled[name] = value
            sources.setdefault(name, source)

    if gpu is not None:
        fill("gpu_name", gpu.name, "snapshot")
        fill("total_gib", gpu.total_gib, "snapshot")
        fill("compute_capability", gpu.compute_capability, "snapshot")
        if phase in _STARTUP_PHASES:
            fill("free_gib", gpu.free_gib, "snapshot")
    if command is not None:
        for name, flag in (
            ("max_num_seqs", "--max-num-seqs"),
            ("max_num_batched_tokens", "--max-num-batched-tokens"),
            ("tensor_parallel_size", "--tensor-parallel-size"),
            ("max_model_len", "--max-model-len"),
        ):
            value = command.value(flag)
            if value is not None and value.isdigit() and int(value) > 0:
                fill(name, int(value), "command")
        utilization = command.value("--gpu-memory-utilization")
        if utilization is not None:
            with contextlib.suppress(ValueError):
                fill("gpu_memory_utilization", float(utilization), "command")
        fill("enforce_eager", True if command.has("--enforce-eager") else None, "command")
        fill("kv_cache_dtype", command.value("--kv-cache-dtype"), "command")
        fill("quantization", command.value("--quantization"), "command")
    if budget is not None:
        fill("total_gib", budget.total_gib, "budget")
        fill("model", budget.model, "budget")
        fill("gpu_name", budget.gpu, "budget")
    model = facts.model or (budget.model if budget is not None else None)
    if catalog is not None and model:
        fill("num_attention_heads", catalog.attention_heads(model), "catalog")
    return replace_facts(facts, filled)


# facts that are sizes or counts: zero or less means the reading failed, so the fact is dropped
_POSITIVE = (
    "total_gib",
    "requested_gib",
    "tried_to_allocate_gib",
    "model_weights_gib",
    "needed_kv_cache_gib",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "num_attention_heads",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "requested_tokens",
    "context_limit",
)
_NON_NEGATIVE = ("free_gib", "kv_cache_tokens", "estimated_max_model_len")


def _plausible(facts: Facts) -> Facts:
    """Facts without values no GPU or vLLM config can have, so no calculator divides by them."""
    bad: dict[str, object] = {}
    for name in _POSITIVE:
        value = getattr(facts, name)
        if isinstance(value, int | float) and value <= 0:
            bad[name] = None
    for name in _NON_NEGATIVE:
        value = getattr(facts, name)
        if isinstance(value, int | float) and value < 0:
            bad[name] = None
    if facts.total_gib is not None and not 1 <= facts.total_gib <= 4096:
        bad["total_gib"] = None  # no GPU (or MIG slice) has less than 1 GiB or more than 4 TiB
    if facts.num_gpu_blocks is not None and facts.num_gpu_blocks < 0:
        bad["num_gpu_blocks"] = 0  # vLLM 0.1 printed "# GPU blocks: -1" for no room at all
    util = facts.gpu_memory_utilization
    if util is not None and not 0.01 <= util <= 1:  # below 1 % nothing loads; vLLM caps it at 1
        bad["gpu_memory_utilization"] = None
    return replace_facts(facts, bad)


def replace_facts(facts: Facts, changes: dict[str, object]) -> Facts:
    """A copy of `facts` with some fields set (Facts is frozen)."""
    if not changes:
        return facts
    return msgspec.structs.replace(facts, **changes)


_GPUS_AVAILABLE = first_use_re(r"(?:number of available GPUs|exceeds available GPUs) \((\d+)\)")


def _gpus_present(snapshot: Snapshot | None, evidence: Sequence[str]) -> int | None:
    """GPUs on the host: from a snapshot, or from vLLM's "number of available GPUs (N)" error.

    A budget's GPU count is what was asked for, not what exists, so it is not used here.
    """
    if snapshot is not None and snapshot.gpus:
        return len(snapshot.gpus)
    for line in evidence:
        if match := _GPUS_AVAILABLE.search(line):
            return int(match.group(1))
    return None


def _flags_exist(edit: CommandEdit | None, pack: FixPack, span: VersionSpan) -> bool:
    """The last guard: a change that sets a flag the version lacks is never offered."""
    if edit is None:
        return True
    for flag, _ in edit.settings:
        spec = pack.flag(flag)
        if spec is not None and not all(spec.exists(v) for v in span):
            return False
    return True


# the facts a fix's settings may change that the budget can re-run with (`Catalog.reestimate`)
_RERUN_FACTS = (
    "max_model_len",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "quantization",
)


def _set_facts(edit: CommandEdit, pack: FixPack) -> dict[str, str]:
    """The facts an edit sets (the flag history's `fact` of each flag), as their values' text."""
    found: dict[str, str] = {}
    for flag, values in edit.settings:
        spec = pack.flag(flag)
        if spec is not None and spec.fact in _RERUN_FACTS and len(values) == 1:
            found[spec.fact] = values[0]
    return found


def _number(text: str | None, kind: type[int] | type[float]) -> float | None:
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        return None


def _budget_allows(proposal: Proposal, edit: CommandEdit | None, ctx: FixContext) -> bool:
    """Whether the budget lets a change work, so advice never contradicts it.

    A `--gpu-memory-utilization` above the largest that passes the startup check at the budget's
    free memory (vLLM's own check, exact arithmetic) cannot start. A `--max-model-len` longer than
    the budget re-run with every setting of the change (its parallel size, utilization, KV dtype,
    quantization) holds, beyond the estimate's own spread, leaves no KV cache for one request;
    a length the log's own figures give (a change citing a line) outranks the estimate.
    """
    budget = ctx.budget
    if edit is None or budget is None:
        return True
    values = _set_facts(edit, ctx.pack)
    utilization = _number(values.get("gpu_memory_utilization"), float)
    ceiling = budget.startup_check.max_passing_utilization
    if utilization is not None and ceiling is not None and utilization > ceiling:
        return False
    length = _number(values.get("max_model_len"), int)
    if length is None or ctx.catalog is None or any(s.startswith("line ") for s in proposal.source):
        return True
    parallel = _number(values.get("tensor_parallel_size"), int)
    rerun = ctx.catalog.reestimate(
        budget,
        max_model_len=int(length),
        tensor_parallel_size=int(parallel) if parallel else None,
        gpu_memory_utilization=utilization,
        kv_cache_dtype=values.get("kv_cache_dtype"),
        quantization=values.get("quantization"),
    )
    if rerun is None or rerun.kv_bytes_per_token <= 0:
        return True
    spread = rerun.sources.get("available_kv_gib")
    margin_gib = spread.uncertainty_gib if spread is not None and spread.uncertainty_gib else 0.0
    return rerun.max_model_len_fit + margin_gib * GIB / rerun.kv_bytes_per_token >= length


def _target(proposal: Proposal, edit: CommandEdit | None, recipe: FixRecipe) -> str:
    """What a fix changes (`edit`, its change read as a command edit), so two fixes never change
    the same thing."""
    if edit is not None and edit.set_flag is not None:
        return edit.set_flag
    if edit is not None and edit.env is not None:
        return edit.env[0]
    return proposal.change if recipe.id == "remove-unknown-flag" else recipe.id


# (order, recipe, its flag spelled for the span) of the recipes serving a phase in every version
# of a span, in file order
_Candidates = tuple[tuple[int, FixRecipe, str | None], ...]
_MAX_SPANS = 256  # (phase, span) pairs kept per pack: spans come from logs, so the table is bounded


@per_pack()
def _candidates_of(pack: FixPack) -> dict[tuple[Phase, VersionSpan], _Candidates]:
    """Per pack, the recipes each (phase, span) may offer: what depends on neither the facts nor
    the findings is decided once, not for every recipe of every diagnosis."""
    return {}


def _candidates(pack: FixPack, phase: Phase, span: VersionSpan) -> _Candidates:
    table = _candidates_of(pack)
    found = table.get((phase, span))
    if found is None:
        found = tuple(
            (order, recipe, pack.spelling(recipe.flags, span) if recipe.flags else None)
            for order, recipe in enumerate(pack.recipes)
            if recipe.serves(phase) and all(recipe.versions.contains(v) for v in span)
        )
        found = tuple(item for item in found if not item[1].flags or item[2] is not None)
        if len(table) >= _MAX_SPANS:
            table.clear()
        table[phase, span] = found
    return found


# (score, file order, recipe, proposal, the proposal's change read once as a command edit)
_Ranked = tuple[float, int, FixRecipe, Proposal, CommandEdit | None]


def _proposals(ctx: FixContext, pack: FixPack) -> list[_Ranked]:
    found: list[_Ranked] = []
    rules: set[str] | None = None  # the diagnosed phase's rules, for recipes that name rules
    for order, recipe, flag in _candidates(pack, ctx.phase, ctx.span):
        if recipe.with_rules or recipe.without_rules:
            if rules is None:
                rules = {f.rule for f in ctx.findings if f.phase == ctx.phase}
            if not recipe.admits(rules):
                continue
        missing = ctx.missing(*recipe.needs)
        if missing and recipe.without_facts == "skip":
            continue
        view = ctx if flag == ctx.flag else ctx.with_flag(flag)  # most recipes name no flag: no copy
        for proposal in CALCULATORS[recipe.calculator](view):
            edit = edit_of(proposal.change, pack.aliases)
            if _flags_exist(edit, pack, ctx.span) and _budget_allows(proposal, edit, ctx):
                found.append((recipe.rank / max(proposal.likelihood, 0.01), order, recipe, proposal, edit))
    return sorted(found, key=lambda item: (item[0], item[1]))


class FixRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What is known about one failure, for `rank_fixes`.

    `engine_version` is the stated vLLM version; without one, `version_range` (Engine.range, e.g.
    `>=0.9.1,<=0.13`) bounds it, and a flag is offered only if every version in the range has it.
    `evidence` is the text of the decisive log lines, for numbers no fact carries (prompt tokens,
    GPUs available, the checkpoint's quantization method). `command` is the `vllm serve` command
    as the person gave it; `top` how many fixes to return.
    """

    phase: Phase
    facts: Facts
    findings: Sequence[Finding] = ()
    budget: Budget | None = None
    snapshot: Snapshot | None = None
    engine_version: str | None = None
    version_range: str | None = None
    command: str | None = None
    top: int = 5
    fact_sources: Mapping[str, str] = msgspec.field(default_factory=dict)
    evidence: Sequence[str] = ()


def rank_fixes(request: FixRequest, pack: FixPack, catalog: Catalog | None = None) -> list[Fix]:
    """The `request.top` fixes for this failure, best first, each one change with its expected effect.

    `pack` (the recipes and flag history) and `catalog` (what the budget's catalog knows) are the
    loaded knowledge the ranking reads; `request` is the failure.
    """
    r = request
    if r.top <= 0:
        return []
    span = parse_span(r.engine_version, r.version_range)
    parsed = parse_command(r.command, pack.aliases) if r.command else None
    sources = dict(r.fact_sources)
    gpu = _pick_gpu(r.snapshot, r.facts, parsed)
    merged = _plausible(_merge_facts(r.phase, _plausible(r.facts), sources, gpu, r.budget, catalog, parsed))
    ctx = FixContext(
        phase=r.phase,
        facts=merged,
        sources=sources,
        findings=tuple(r.findings),
        lines=tuple(r.evidence),
        budget=r.budget,
        snapshot=r.snapshot,
        gpu=gpu,
        version=span[-1],
        span=span,
        floor_known=has_floor(r.engine_version, r.version_range),
        command=parsed,
        catalog=catalog,
        pack=pack,
        gpus_present=_gpus_present(r.snapshot, r.evidence),
        said=said_text(r.findings, r.evidence),
    )
    fixes: list[Fix] = []
    taken: set[str] = set()
    for _, _, recipe, proposal, edit in _proposals(ctx, pack):
        target = _target(proposal, edit, recipe)
        if target in taken:
            continue
        taken.add(target)
        fixes.append(
            Fix(
                id=recipe.id,
                rank=len(fixes) + 1,
                title=proposal.title or recipe.title,
                change=proposal.change,
                why=proposal.why,
                tradeoff=recipe.tradeoff,
                source=[s for s in proposal.source if s],
                exact=proposal.exact,
                needs=list(proposal.needs),
                to_make_exact=None if proposal.exact else to_make_exact(proposal.needs),
            )
        )
        if len(fixes) == r.top:
            break
    return fixes
