"""From rule hits to a diagnosis: the root phase, its confidence, the facts and the evidence.

The root is the earliest decisive failure in startup order (DESIGN §3.1). Wrappers ("Engine core
initialization failed", EngineDeadError) are never the root. A bare CUDA OOM says nothing about
when it happened, so it is placed by the traceback frames printed with it, else by the last stage
marker before it in the log ("Loading safetensors checkpoint shards", "Capturing CUDA graphs",
"Application startup complete"), else by the caller's hints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from service.diagnosis.frames import OOM_PHASE, cut_traceback, deepest_frame
from service.diagnosis.normalize import Document, Line
from service.diagnosis.scan import Hit, present, scan_lines
from service.packs import SignatureIndex
from service.packs.signatures import CompiledRule
from service.schemas import Phase

__all__ = ["PHASE_STAGE", "Context", "Placement", "Verdict", "interpret", "place_oom"]

# Where in startup each failure phase happens; ties between phases break on the log line.
PHASE_STAGE: dict[Phase, int] = {
    "parallelism_config": 0,
    "quantization_config": 0,
    "dtype_unsupported": 1,
    "startup_budget": 1,
    "weights_oom": 2,
    "profiling_inconsistent": 3,
    "kv_cache_capacity": 3,
    "warmup_oom": 4,
    "runtime_oom": 5,
    "request_too_long": 5,
    "kv_preemption": 5,
    "not_memory": 0,
    "no_failure": 9,
}

_STAGE_PHASE: dict[str, Phase] = {
    "config": "weights_oom",
    "init": "weights_oom",
    "loading": "weights_oom",
    "profiling": "warmup_oom",
    "warmup": "warmup_oom",
    "serving": "runtime_oom",
}

_ENGINE_STAGES = ("loading", "profiling", "warmup", "serving")
TRACEBACK = "Traceback (most recent call last)"
HintFn = Callable[[], Phase | None]
_FRAME_WINDOW = 400
MAX_PLACED_OOMS = 16
_AFTER_WINDOW = 120


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a bare CUDA OOM happened, and what told us."""

    phase: Phase
    confidence: float
    basis: str
    line: int | None = None


@dataclass(slots=True)
class Verdict:
    """The root phase, how sure, the hit that decided it and why, and the phase of every candidate."""

    phase: Phase
    confidence: float
    root: Hit | None
    basis: str
    decisive: list[Hit] = field(default_factory=list)
    first_exception: Hit | None = None
    hit_phases: dict[tuple[int, str], Phase] = field(default_factory=dict)


class Context:
    """The document, its eager hits, and lazy stage/frame lookups by line range (cached)."""

    def __init__(self, doc: Document, signatures: SignatureIndex, hits: list[Hit]) -> None:
        self.doc = doc
        self.signatures = signatures
        self.hits = hits
        self._lazy: dict[tuple[int, int], list[Hit]] = {}
        self._present: list[CompiledRule] | None = None

    def present(self) -> list[CompiledRule]:
        """Lazy-index rules matching anywhere in the document (one RE2 pass, cached)."""
        if self._present is None:
            self._present = present(self.doc, self.signatures.lazy)
        return self._present

    def sign_anywhere(self, stage: str) -> Hit | CompiledRule | None:
        """A position-free sign of `stage`: a wrapper only that stage prints (a worker failing in its
        constructor, a dead engine), or the person saying when it fails."""
        for hit in self.hits:
            if hit.compiled.rule.kind == "wrapper" and hit.compiled.rule.stage == stage:
                return hit
        return next((c for c in self.present() if c.rule.anywhere and c.rule.stage == stage), None)

    def lazy(self, first: int, last: int) -> list[Hit]:
        """Stage-marker and frame hits on lines first..last."""
        key = (first, last)
        if key not in self._lazy:
            self._lazy[key] = scan_lines(self.doc, self.signatures.lazy, first, last)
        return self._lazy[key]

    def last_marker(self, before: int) -> Hit | None:
        """The last stage marker (lazy or a fact line with a stage) before line `before`."""
        eager = [
            h
            for h in self.hits
            if h.compiled.rule.stage is not None
            and h.compiled.rule.kind != "frame"
            and h.line.number < before
        ]
        floor = eager[-1].line.number if eager else 0
        high, size = before - 1, 200
        while high > floor:
            low = max(floor + 1, high - size + 1)
            found = [h for h in self.lazy(low, high) if h.compiled.rule.kind == "stage"]
            if found:
                return found[-1]
            high, size = low - 1, size * 4
        return eager[-1] if eager else None

    def last_marker_after(self, after: int) -> Hit | None:
        """The last marker of a running engine (loading onwards) after line `after`: config lines
        and constructor calls only say an engine was being created, not how far it got."""
        end = len(self.doc.lines)
        found = [
            h
            for h in (*self.hits, *self.lazy(after + 1, end))
            if h.line.number > after
            and h.compiled.rule.kind != "frame"
            and h.compiled.rule.stage in _ENGINE_STAGES
        ]
        return max(found, key=lambda h: h.line.number) if found else None


def _traceback_start(doc: Document, line: Line, limit: int) -> int:
    """Line number of the traceback header (same process) that `line` ends, or a window start."""
    for number in range(line.number - 1, max(0, line.number - limit), -1):
        candidate = doc.line(number)
        if candidate.source == line.source and TRACEBACK in candidate.text:
            return number
    return max(1, line.number - 60)


def _frame_stage(frames: list[Hit], source: str | None) -> str | None:
    """The stage named by the outermost stage-specific frame (tracebacks list outermost first)."""
    for hit in frames:
        if (source is None or hit.line.source == source) and hit.compiled.rule.stage is not None:
            return hit.compiled.rule.stage
    return None


def place_oom(ctx: Context, oom: Hit, hint: HintFn) -> Placement:
    """Place a bare CUDA OOM in startup order (DESIGN §3.1)."""
    line = oom.line
    start = _traceback_start(ctx.doc, line, _FRAME_WINDOW)
    frames = [h for h in ctx.lazy(start, line.number) if h.compiled.rule.kind == "frame"]
    stage = _frame_stage(frames, line.source)
    if stage is not None:
        return Placement(_STAGE_PHASE[stage], 0.9, "traceback frames", line.number)
    known = deepest_frame(ctx.doc, ctx.signatures.frames, start, line.number, source=line.source)
    if known is not None and known.stage in OOM_PHASE:
        return Placement(OOM_PHASE[known.stage], 0.85, f"traceback frame {known.function}", known.line)
    marker = ctx.last_marker(line.number)
    if marker is not None:
        stage_name = marker.compiled.rule.stage or "loading"
        return Placement(_STAGE_PHASE[stage_name], 0.8, "log lines before it", marker.line.number)
    after = [
        h for h in ctx.lazy(line.number + 1, line.number + _AFTER_WINDOW) if h.compiled.rule.kind == "frame"
    ]
    stage = _frame_stage(after, after[0].line.source) if after else None
    if stage is not None:
        return Placement(_STAGE_PHASE[stage], 0.75, "traceback frames after it", line.number)
    given = hint()
    if given is not None:  # only set when the weights alone cannot fit: then nothing else could run
        return Placement(given, 0.6, "the model and GPU given", None)
    for stage in ("loading", "warmup", "serving"):
        sign = ctx.sign_anywhere(stage)
        if isinstance(sign, Hit):
            title = sign.compiled.rule.title.split(" (")[0]
            basis = f"{title[0].lower()}{title[1:]}"
            return Placement(_STAGE_PHASE[stage], 0.65, basis, sign.line.number)
        if sign is not None:
            title = sign.rule.title.split(" (")[0]
            return Placement(_STAGE_PHASE[stage], 0.55, f"{title[0].lower()}{title[1:]}", None)
    # an OOM stated before the log it belongs to (an issue title, a sentence above the paste) happened
    # after the last stage that log reached
    last = ctx.last_marker_after(line.number)
    if last is not None and last.compiled.rule.stage is not None:
        return Placement(_STAGE_PHASE[last.compiled.rule.stage], 0.5, "log lines after it", last.line.number)
    phase = oom.compiled.rule.phase or "warmup_oom"
    return Placement(phase, 0.5, "no context around it", None)


def _decisive_phase(ctx: Context, hit: Hit, hint: HintFn) -> tuple[Phase, float, str]:
    rule = hit.compiled.rule
    if rule.kind == "oom":
        placement = place_oom(ctx, hit, hint)
        return placement.phase, placement.confidence, placement.basis
    assert rule.phase is not None
    return rule.phase, 0.95, "its own message"


def _no_hint() -> Phase | None:
    return None


def interpret(ctx: Context, hint: HintFn = _no_hint) -> Verdict:
    """Choose the root phase among the hits; `hint` is asked only for an OOM nothing else places."""
    hits = ctx.hits
    candidates: list[tuple[int, int, int, Phase, float, str, Hit]] = []
    wrapped = {h.line.number for h in hits if h.compiled.rule.kind == "wrapper"}
    decisive = [h for h in hits if h.compiled.rule.kind in ("failure", "oom")]
    if any(h.line.number not in wrapped for h in decisive):
        # a wrapper quoting the root message ("Worker failed with error 'CUDA out of memory…'") is
        # only a copy of it; the original line decides
        decisive = [h for h in decisive if h.line.number not in wrapped]
    ooms = [h for h in decisive if h.compiled.rule.kind == "oom"]
    if len(ooms) > MAX_PLACED_OOMS:  # every rank and request may repeat it; the first ones decide
        extra = {id(h) for h in ooms[MAX_PLACED_OOMS:]}
        decisive = [h for h in decisive if id(h) not in extra]
    for hit in decisive:
        rule = hit.compiled.rule
        phase, confidence, basis = _decisive_phase(ctx, hit, hint)
        severity_rank = 0 if rule.severity == "error" else 1
        candidates.append((severity_rank, PHASE_STAGE[phase], hit.line.number, phase, confidence, basis, hit))
    phases = {(c[6].line.number, c[6].rule_id): c[3] for c in candidates}
    exceptions = [h for h in hits if h.compiled.rule.kind in ("exception", "failure", "oom")]
    first_exception = next((h for h in exceptions if h.compiled.rule.severity == "error"), None)
    if candidates:
        best = min(candidates, key=lambda c: (c[0], c[1], c[2]))
        _, _, _, phase, confidence, basis, root = best
        decisive = [c[6] for c in candidates if c[3] == phase and c[0] == best[0]]
        return Verdict(phase, confidence, root, basis, decisive, first_exception, phases)
    errors = [h for h in hits if h.compiled.rule.kind == "exception" and h.line.number not in wrapped]
    cut = cut_traceback(ctx.doc)
    known = (
        deepest_frame(ctx.doc, ctx.signatures.frames, cut[0], cut[1], source=cut[2], with_phase=True)
        if cut
        else None
    )
    if known is not None and known.phase is not None:  # the paste stops inside a function of one phase
        basis = f"a traceback cut inside {known.function}, which only raises {known.phase} errors"
        return Verdict(known.phase, 0.7, None, basis, [], first_exception)
    if errors:
        root = errors[0]
        return Verdict("not_memory", 0.6, root, "an error that is not about GPU memory", [root], root)
    wrappers = [h for h in hits if h.compiled.rule.kind == "wrapper" and h.compiled.rule.severity == "error"]
    if wrappers:
        root = wrappers[0]
        basis = "only a wrapper error; its root cause is not in the excerpt"
        return Verdict("not_memory", 0.35, root, basis, [root], first_exception)
    seen_vllm = any(h.compiled.rule.kind in ("info", "version") for h in hits)
    return Verdict("no_failure", 0.9 if seen_vllm else 0.5, None, "no failure signature", [], None)
