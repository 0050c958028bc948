"""The log classifier: normalize -> scan signatures -> interpret phase, facts and evidence.

Pure: takes text and loaded packs, returns a Diagnosis (budget None, fixes []); no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from service.budget import find_gpu
from service.diagnosis.command import join_commands
from service.diagnosis.continued import continue_hits
from service.diagnosis.evidence import collect_evidence, collect_findings
from service.diagnosis.facts import collect_facts, infer_engine
from service.diagnosis.hints import (
    budget_reading,
    gpu_gib_told,
    gpu_named,
    gpus_counted,
    model_named,
    weights_hint,
)
from service.diagnosis.host_limit import host_room
from service.diagnosis.interpret import Context, interpret
from service.diagnosis.misleading import flag_misleading, implied_by_flagged
from service.diagnosis.normalize import Document, is_prose
from service.diagnosis.placement import BudgetReading, HostRoom
from service.diagnosis.quoted import quoted_hits
from service.diagnosis.scan import Hit, scan_document
from service.diagnosis.settings import stated_settings
from service.diagnosis.wording import describe
from service.packs import RulePacks
from service.schemas import Diagnosis
from service.versions import parse_version

__all__ = ["classify_text"]


def classify_text(
    log: str,
    packs: RulePacks,
    *,
    request_facts: dict[str, object] | None = None,
    command: str | None = None,
    vllm_version: str | None = None,
    hint: BudgetReading | None = None,
) -> Diagnosis:
    """Classify one pasted log; request facts and a command fill what the log does not state."""
    doc = Document(log)
    found_hits = scan_document(doc, packs.signatures.eager)
    hits = join_commands(doc, continue_hits(doc, packs.signatures.eager, found_hits.hits))
    quoted = quoted_hits(doc, packs.signatures.eager, hits)
    if quoted:  # messages quoted in the person's sentences, in line order with the rest
        hits = sorted([*hits, *quoted], key=lambda h: h.line.number)
    settings = list(stated_settings(doc, packs.fixes))

    def ask_hint() -> BudgetReading | None:
        if hint is not None:
            return hint
        early = collect_facts(hits, set(), request_facts or {}, command, vllm_version, packs.fixes, settings)
        values = early.values
        if not values.get("model") and not _loaded(values):  # a model, or a size class, their words name
            model = model_named(_said_lines(doc), packs.catalog)
            values = {**values, "model": model} if model else values
        if not values.get("gpu_name") and not values.get("total_gib"):  # a GPU the person's words name
            named = gpu_named(_said_lines(doc), packs.catalog)
            told = gpu_gib_told(_said_lines(doc), packs.catalog)
            if named and told is not None and abs(find_gpu(packs.catalog, named, None).total_gib - told) > 1:
                named = None  # "two 16 GB V100s": the size they give, not the catalog's default card
            if named:
                values = {**values, "gpu_name": named}
            elif told is not None:
                values = {**values, "gpu_name": f"{told:g}GiB"}
        if not values.get("tensor_parallel_size") and not values.get("pipeline_parallel_size"):
            # weights larger than every GPU the person says they have together can only fail while
            # loading; "8块4090" with no parallel size stated is not one GPU holding them all
            count = gpus_counted(_said_lines(doc), packs.catalog)
            values = {**values, "tensor_parallel_size": count} if count and count > 1 else values
        reading = budget_reading(values, packs.catalog, packs.evidence.in_use_margins)
        if reading is None and weights_hint(values, packs.catalog) == "weights_oom":
            return BudgetReading(weights="exceed")  # a model the catalog lacks, sized from its id
        return reading

    def ask_host_room() -> HostRoom | None:
        early = collect_facts(hits, set(), request_facts or {}, command, vllm_version, packs.fixes, settings)
        values = early.values
        if not values.get("model"):
            model = model_named(_said_lines(doc), packs.catalog)
            values = {**values, "model": model} if model else values
        commands = [str(h.facts["command"]) for h in hits if isinstance(h.facts.get("command"), str)]
        commands += [command] if command else []
        lines = [doc.line(n).text for n in range(1, len(doc) + 1)]
        swap = packs.fixes.flag("--swap-space")
        removed = swap.versions.removed if swap is not None else None
        return host_room(lines, values, commands, packs.catalog, packs.evidence.host_plenty, removed)

    context = Context(
        doc,
        packs.signatures,
        hits,
        packs.evidence,
        packs.prose,
        packs.fragments,
        found_hits.copies,
        packs.fixes,
        ask_host_room,
    )
    verdict = interpret(context, functools.cache(ask_hint))
    stated = next((str(h.facts["vllm_version"]) for h in hits if "vllm_version" in h.facts), None)
    matched_rules = [h.compiled.rule for h in hits]
    if not stated and not vllm_version:  # only then do the wordings of stage lines matter
        matched_rules += [c.rule for c in context.present()]
    engine = infer_engine(matched_rules, stated, vllm_version)
    known = parse_version(engine.version) if engine.version else None
    version_text = ".".join(map(str, known)) if known else None
    decisive_lines = {h.line.number for h in verdict.decisive}
    if verdict.root is not None:
        decisive_lines.add(verdict.root.line.number)
        decisive_lines.update(h.line.number for h in hits if h.line.number == verdict.root.line.number)
    if verdict.root is not None and all(h is not verdict.root for h in hits):  # known from its template
        hits = sorted([*hits, verdict.root], key=lambda h: h.line.number)
    found = collect_facts(
        hits, decisive_lines, request_facts or {}, command, version_text, packs.fixes, settings
    )
    misleading = flag_misleading(packs.misleading, hits, found.sources, engine)
    implied = implied_by_flagged(packs.misleading, misleading, found.sources)
    if implied:  # what a misprinted figure implies is not stated: the command or another line may say it
        hits = [_without(h, implied) for h in hits]
        found = collect_facts(
            hits, decisive_lines, request_facts or {}, command, version_text, packs.fixes, settings
        )
    facts = found.to_facts()
    title, summary = describe(verdict, facts)
    return Diagnosis(
        phase=verdict.phase,
        confidence=verdict.confidence,
        title=title,
        summary=summary,
        evidence=collect_evidence(doc, verdict, hits, found.sources),
        facts=facts,
        findings=collect_findings(verdict, found_hits, found.flag_issues, len(doc)),
        budget=None,
        fixes=[],
        rules_version=packs.digest,
        engine=engine,
        fact_sources=found.sources,
        misleading=misleading,
    )


# Figures a log prints only once the weights are in: a model the person's words name loosely ("R1",
# "a 70B") does not overrule them with an estimate that the weights could not load
_LOADED_FACTS = (
    "model_weights_gib",
    "available_kv_cache_gib",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "needed_kv_cache_gib",
    "estimated_max_model_len",
)


def _loaded(values: dict[str, object]) -> bool:
    return any(values.get(name) is not None for name in _LOADED_FACTS)


def _without(hit: Hit, implied: set[tuple[int, str]]) -> Hit:
    """`hit` without the facts its line derives from a misprinted figure."""
    dropped = {name for number, name in implied if number == hit.line.number}
    if not dropped.intersection(hit.facts):
        return hit
    return Hit(hit.compiled, hit.line, {k: v for k, v in hit.facts.items() if k not in dropped}, hit.repeats)


_SAID_LINES = 300  # the person's words sit around the paste: its first and last lines are read


def _said_lines(doc: Document) -> Iterator[str]:
    """The lines around the paste that read as a person's sentence."""
    total = len(doc)
    first, last = range(1, min(total, _SAID_LINES) + 1), range(max(1, total - _SAID_LINES + 1), total + 1)
    around = sorted({*first, *last})
    said: dict[str, str | None] = {}  # a line's verdict follows from its text: copies are judged once
    for number in around:
        raw = doc.lines[number - 1]
        if raw not in said:
            line = doc.line(number)
            said[raw] = line.text if is_prose(line) else None
        text = said[raw]
        if text is not None:
            yield text
