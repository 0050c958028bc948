"""Placing a failure that does not name its stage by weighing every clue around it (DESIGN §3.1).

A bare CUDA OOM says nothing about when it happened. Instead of a chain of fallbacks, every clue is
gathered at once: the failing process's own traceback frames, its stage timeline (the last marker it
printed, and whether another process's later line shows the run went one stage further), frames
printed after the message, wrappers only one stage prints, signs in the message itself, the
person's words, the budget's verdict on the weights, and the rule's own default. Each clue votes
for a stage with the weight `rules/evidence.yaml` gives its kind; votes for the same phase combine
as independent witnesses, and the confidence is the winner's support less a share of the
runner-up's, so two agreeing clues say more than one and a close second says less.

Processes are told apart by their prefix (`(EngineCore_DP0 pid=…)`, `(Worker_TP1 …)`, `[rank3]:`,
`vllm-1  | `): interleaved tracebacks are read per process, and another process's marker only
counts as far as the failing process's own timeline can explain it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, Protocol

import msgspec

from service.diagnosis.frames import neutral_library, stack_below
from service.diagnosis.normalize import Document, Line, is_prose
from service.diagnosis.scan import Hit
from service.first_use import first_use_re
from service.packs.evidence import ClueKind, EvidenceWeights
from service.packs.signatures import Stage
from service.schemas import Phase

__all__ = [
    "PLACED_STAGE",
    "BudgetReading",
    "HostRoom",
    "STAGE_PHASE",
    "TRACEBACK",
    "Clue",
    "HintFn",
    "Placement",
    "StageLookup",
    "budget_clues",
    "is_marker",
    "place",
    "place_line",
    "stage_after",
    "stage_before",
    "stage_after_end",
    "stage_orders",
    "weigh",
]

# The phase a CUDA OOM has in each stage of a run: allocating the KV cache after it was sized (V0
# `CacheEngine._allocate_kv_cache`, V1 `initialize_kv_cache` -> `_allocate_kv_cache_tensors`) is
# "no memory for cache blocks" (DESIGN §3.1), not a warm-up.
STAGE_PHASE: dict[Stage, Phase] = {
    "config": "weights_oom",
    "init": "weights_oom",
    # a worker setting up its device (`init_device`: NCCL, the memory snapshot, the start-up check
    # of free memory against gpu_memory_utilization) before any weight loads: the GPU was already
    # too full to start (DESIGN §3.1)
    "device": "startup_budget",
    "loading": "weights_oom",
    "profiling": "warmup_oom",
    "kv_cache": "kv_cache_capacity",
    "warmup": "warmup_oom",
    "serving": "runtime_oom",
}
_PHASE_STAGE: dict[Phase, Stage] = {
    "weights_oom": "loading",
    "kv_cache_capacity": "kv_cache",
    "warmup_oom": "warmup",
    "runtime_oom": "serving",
}
# The stage each phase a failure can be placed in happens in (the start-up check in the worker's
# device set-up), for evidence that names a phase rather than a stage
PLACED_STAGE: dict[Phase, Stage] = {**_PHASE_STAGE, "startup_budget": "device"}
# How far a run has got at each stage; profiling, sizing and allocating the KV cache and warm-up are
# one step (V1 warms the sampler up inside the profile run, V0 after allocating the cache).
_PROGRESS: dict[Stage, int] = {
    "config": 0,
    "init": 0,
    "device": 0,
    "loading": 1,
    "profiling": 2,
    "kv_cache": 2,
    "warmup": 2,
    "serving": 3,
}
_ENGINE_STAGES: frozenset[Stage] = frozenset({"loading", "profiling", "kv_cache", "warmup", "serving"})
# Stages that say a run started, not how far it got: a pasted command or engine arguments (`config`),
# an engine's constructor or the person's "when starting it" (`init`).
_STARTED = frozenset({"config", "init"})
_NOT_LOADED = frozenset({"config", "init", "device"})
TRACEBACK = "Traceback (most recent call last)"
_FRAME_WINDOW = 400
_AFTER_WINDOW = 120


# What a host memory limit the paste states says against what vLLM keeps in host RAM
# (service/diagnosis/host_limit.py): below it, or holding it all with plenty to spare.
HostRoom = Literal["short", "plenty"]


class BudgetReading(msgspec.Struct, frozen=True):
    """What the estimator's budget for the model and GPU a paste names says of a bare OOM's stage
    (service/diagnosis/hints.py computes it; the weights of what it says are rules/evidence.yaml's).

    `weights`: the weights per GPU exceed the memory there is, or fit with room for a KV pool (None:
    neither for sure). `held`: the failing process's in-use memory (the allocator's line) against
    them: far below its weights, or at its weights and its KV pool.
    """

    weights: Literal["exceed", "room"] | None = None
    held: Literal["below_weights", "weights_and_pool"] | None = None
    basis: str = "the model and GPU given"


HintFn = Callable[[], BudgetReading | None]


class Clue(msgspec.Struct, frozen=True):
    """One piece of evidence for a stage: its kind (a key of the weights table), where, and why."""

    kind: ClueKind
    stage: Stage
    basis: str
    line: int | None = None
    share: float = 1.0  # of its kind's weight: a witness spread over several stages gives each a part
    against: bool = False  # evidence that the failure was not in this stage: it shrinks its support


class Placement(msgspec.Struct, frozen=True):
    """Where a failure happened, how sure, what told us, and every clue that was weighed."""

    phase: Phase
    confidence: float
    basis: str
    line: int | None = None
    clues: tuple[Clue, ...] = ()


class StageLookup(Protocol):
    """What placement reads from a document: eager hits, lazy stage/frame hits and stage markers by
    range (each line scanned once however many failures ask), position-free
    signs of a stage (wrappers with a line, message signs without), and the person's stage words."""

    @property
    def doc(self) -> Document: ...

    @property
    def hits(self) -> list[Hit]: ...

    def lazy(self, first: int, last: int) -> list[Hit]: ...

    def markers(self, first: int, last: int) -> list[Hit]: ...

    def eager_marker_before(self, before: int, source: str) -> int: ...

    def signs(self) -> list[tuple[Stage, str, int | None]]: ...

    def prose_stages(self) -> list[tuple[Stage, str, int]]: ...

    def stages_said(self) -> list[tuple[Stage, int, str]]: ...

    def remedies(self) -> list[Clue]: ...

    def table_frame(self, first: int, last: int, source: str) -> tuple[Stage, str, int] | None: ...


def _traceback_start(doc: Document, line: Line, limit: int) -> int:
    """Line number of the traceback header (same process) that `line` ends, or a window start."""
    raw = doc.lines
    for number in range(line.number - 1, max(0, line.number - limit), -1):
        if TRACEBACK not in raw[number - 1]:  # a line's text is part of its raw line: split only these
            continue
        candidate = doc.line(number)
        if candidate.source == line.source and TRACEBACK in candidate.text:
            return number
    return max(1, line.number - 60)


def _frame_clues(
    frames: list[Hit], source: str, outer: ClueKind, inner: ClueKind, neutral: tuple[str, ...] = ()
) -> list[Clue]:
    """The outermost stage-specific frame of `source` (tracebacks list outermost first) and, with a
    small weight, deeper frames that name another stage. A frame of a library that runs in every stage
    (`neutral`, rules/evidence.yaml `neutral_libraries`) counts only when no other frame names a stage,
    and then as `neutral_frame`: it says the model ran, not when."""
    staged = [h for h in frames if h.line.source == source and h.compiled.rule.stage is not None]
    own = [h for h in staged if neutral_library(h.line.text, neutral) is None]
    if not own:
        if not staged:
            return []
        first = staged[0]
        stage = first.compiled.rule.stage
        assert stage is not None
        folder = neutral_library(first.line.text, neutral)
        basis = f"a frame of {folder}, which runs in every stage"
        return [Clue("neutral_frame", stage, basis, first.line.number)]
    first = own[0]
    stage = first.compiled.rule.stage
    assert stage is not None
    clues = [Clue(outer, stage, "traceback frames", first.line.number)]
    seen = {stage}
    for hit in own[1:]:
        other = hit.compiled.rule.stage
        if other is not None and other not in seen and STAGE_PHASE[other] != STAGE_PHASE[stage]:
            seen.add(other)
            clues.append(Clue(inner, other, "a deeper frame", hit.line.number))
    return clues


def is_marker(hit: Hit) -> bool:
    """Whether a hit marks the stage a process has reached (not a frame, not a position-free sign)."""
    rule = hit.compiled.rule
    return rule.stage is not None and rule.kind != "frame" and not rule.anywhere


_WALK = 256


def _markers_before(ctx: StageLookup, before: int, source: str) -> tuple[Hit | None, list[Hit]]:
    """The failing process's last marker before line `before`, and other processes' markers after it
    (latest first).

    A failure without a process prefix owns every marker. Walks back in blocks, never below the
    process's last eager marker (where the walk must stop), and the lookup scans each line once, so
    many failures cost one pass.
    """
    others: list[Hit] = []
    floor = ctx.eager_marker_before(before, source)
    high = before - 1
    while high >= floor:
        low = max(floor, high - _WALK + 1)
        for hit in reversed(ctx.markers(low, high)):
            if not source or hit.line.source == source:
                return hit, others
            others.append(hit)
        high = low - 1
    return None, others


_PROCESS_NUMBER = first_use_re(r"[\d_\-]*(?:\s.*)?$")


def _process_kind(source: str) -> str:
    """What kind of process a prefix names, without its number, rank or pid: `RayWorkerWrapper`,
    `VllmWorker`, `EngineCore_DP`, `rank` (torch.distributed's `[rank3]:`)."""
    return _PROCESS_NUMBER.sub("", source.split(" ", 1)[0]) if source else ""


def _timeline_clues(ctx: StageLookup, failure: Line) -> list[Clue]:
    own, others = _markers_before(ctx, failure.number, failure.source)
    if own is None:
        if not others:
            return []
        latest = others[0]  # nothing of this process's own: the run's last marker is all there is
        stage = latest.compiled.rule.stage
        assert stage is not None
        return [Clue("marker", stage, "log lines before it", latest.line.number)]
    own_stage = own.compiled.rule.stage
    assert own_stage is not None
    reach = _PROGRESS[own_stage] + 1
    ahead = [
        h
        for h in others
        if h.compiled.rule.stage is not None and _PROGRESS[h.compiled.rule.stage] > _PROGRESS[own_stage]
    ]
    # a sibling (another worker or rank of the same kind) loads, profiles and captures beside this
    # one, not after it: its being one step further says nothing of how far this process got
    kind = _process_kind(failure.source)
    explained = [
        h
        for h in ahead
        if _PROGRESS[h.compiled.rule.stage or "config"] <= reach and _process_kind(h.line.source) != kind
    ]
    if explained:
        later = explained[0]
        stage = later.compiled.rule.stage
        assert stage is not None
        return [
            Clue("marker", stage, "log lines before it", later.line.number),
            Clue("superseded_marker", own_stage, "its own last stage", own.line.number),
        ]
    clues = [Clue("marker", own_stage, "log lines before it", own.line.number)]
    if ahead:
        stage = ahead[0].compiled.rule.stage
        assert stage is not None
        clues.append(Clue("other_marker", stage, "another process", ahead[0].line.number))
    return clues


# Start-up order, for the furthest stage a log shows: within the step _PROGRESS merges, V0 and V1
# both allocate the KV cache after profiling and capture CUDA graphs after that.
_ORDER: dict[Stage, int] = {
    "config": 0,
    "init": 0,
    "device": 0,
    "loading": 1,
    "profiling": 2,
    "kv_cache": 3,
    "warmup": 4,
    "serving": 5,
}


def stage_after(stage: Stage) -> Stage:
    """The stage that follows `stage` in start-up order (serving follows itself). A person's
    "start-up" (`init`) is all of it, so what comes after it is serving."""
    if stage in _STARTED:
        return "serving"
    following = [s for s, order in _ORDER.items() if order == _ORDER[stage] + 1]
    return following[0] if following else stage


def stage_before(stage: Stage) -> Stage:
    """The stage a failure said to come before `stage` happened in: before any request is start-up
    (which step unsaid), before the weights load is a worker setting up its device."""
    if stage == "serving":
        return "init"
    earlier = [s for s, order in _ORDER.items() if order == _ORDER[stage] - 1 and s not in _STARTED]
    return earlier[0] if earlier else "device"


_LAST_ORDER = max(_ORDER[stage] for stage in _ENGINE_STAGES)


def stage_after_end(ctx: StageLookup, before: int, source: str) -> tuple[Stage, Hit] | None:
    """The stage a process was in at line `before` when the last marker before it (its own, else the
    run's) is a line printed as its stage ended (`finishes`): the next stage of start-up."""
    own, others = _markers_before(ctx, before, source)
    last = own if own is not None else (others[0] if others else None)
    if last is None or not last.compiled.rule.finishes or last.compiled.rule.stage is None:
        return None
    reached = _ORDER[last.compiled.rule.stage]
    following = [stage for stage, order in _ORDER.items() if order == reached + 1]
    return (following[0], last) if following else None


def stage_orders(ctx: StageLookup, line: Line) -> tuple[int, int | None]:
    """How far in start-up order (0 config … 5 serving) the process that printed `line` had got
    when it printed it, and how far it got after it (None: no marker of its own follows), by its
    own stage markers."""
    own, _ = _markers_before(ctx, line.number, line.source)
    stage = own.compiled.rule.stage if own is not None else None
    clue = _marker_after(ctx, line.number, printed=True, source=line.source)
    return (_ORDER.get(stage, 0) if stage else 0), (None if clue is None else _ORDER[clue.stage])


def _marker_after(ctx: StageLookup, after: int, printed: bool = False, source: str = "") -> Clue | None:
    """The furthest stage a running engine reached after line `after` (a failure stated above its
    log, or a console that lists the newest line first). When the failure is a line a program
    printed inside the log (`printed`; not a title or a sentence), the run it stopped showed that
    stage: an OOM is fatal, so it struck no earlier (`marker_after_log`, above the person's words).
    A failure a process printed under its prefix (`source`) is placed by that process's markers
    only: another process (a plugin's scheduler, the API server) reaching a stage says nothing of
    when this one failed."""
    best: Hit | None = None
    high = len(ctx.doc.lines)
    # walking back from the end, a marker of the last stage is never replaced (only a further stage
    # replaces the one held): the walk stops there instead of reading the rest of a long paste
    while high > after and (best is None or _ORDER[best.compiled.rule.stage or "config"] < _LAST_ORDER):
        low = max(after + 1, high - _WALK + 1)
        for hit in reversed(ctx.markers(low, high)):
            stage = hit.compiled.rule.stage
            if not is_marker(hit) or stage not in _ENGINE_STAGES or (source and hit.line.source != source):
                continue
            assert stage is not None
            if best is None or _ORDER[stage] > _ORDER[best.compiled.rule.stage or "config"]:
                best = hit
        high = low - 1
    if best is None:
        return None
    stage = best.compiled.rule.stage
    assert stage is not None
    kind: ClueKind = "marker_after_log" if printed else "marker_after"
    return Clue(kind, stage, "log lines after it", best.line.number)


# A wrapper's own words naming the process that failed, as they print it: Ray's task error
# `ray::RayWorkerWrapper.execute_method() (pid=4411, ip=…)`, torchrun's `(pid: 81)`, vLLM's
# `Process EngineCore_DP0 (PID: 312) died with exit code 1` and `Failed core proc(s): {'EngineCore_DP0': 1}`
# (vllm/v1/utils.py, vllm/v1/engine/utils.py).
_NAMED_PROCESS = first_use_re(
    r"\((?:pid[=:] ?|PID: )(?P<pid>\d+)\b|Failed core proc\(s\): \{'(?P<name>[\w\-]+)'"
)


def _named_process(ctx: StageLookup, line: Line) -> Line | None:
    """`line` as said by the process its wrapper's message names, when that process printed lines
    of its own before it (its `(RayWorkerWrapper pid=4411)` or `(EngineCore_DP0 pid=312)` prefix):
    the front-end's line then reads that process's traceback and timeline as the failure's own."""
    if "pid" not in line.text.lower() and "core proc" not in line.text:
        return None
    match = _NAMED_PROCESS.search(line.text)
    if match is None:
        return None
    pid, name = match.group("pid"), match.group("name")
    own = re.compile(rf"(?:^|\s)pid={pid}\b" if pid else rf"^{re.escape(name)}\s")
    for number in range(line.number - 1, max(0, line.number - _FRAME_WINDOW), -1):
        source = ctx.doc.line(number).source
        if source and source != line.source and own.search(source):
            return Line(number=line.number, source=source, level=line.level, text=line.text)
    return None


def gather(
    ctx: StageLookup, line: Line, default: Phase | None, hint: HintFn, neutral: tuple[str, ...] = ()
) -> list[Clue]:
    """Every clue to where the failure stated on `line` happened; `default` is the phase its rule
    gives when nothing else speaks. A wrapper's line naming the failing process (a Ray task error
    with its pid, the API server's failed core procs) is read as that process's, when its own
    process shows no traceback frame of a stage."""
    clues = _gather(ctx, line, default, hint, neutral)
    if not any(c.kind in ("frame", "table_frame", "construction_frame") for c in clues):
        named = _named_process(ctx, line)
        if named is not None:
            joined = _gather(ctx, named, default, hint, neutral)
            if any(c.kind in ("frame", "table_frame", "marker") for c in joined):
                return joined
    return clues


def _gather(
    ctx: StageLookup, line: Line, default: Phase | None, hint: HintFn, neutral: tuple[str, ...]
) -> list[Clue]:
    start, end = _traceback_start(ctx.doc, line, _FRAME_WINDOW), line.number
    frames = [h for h in ctx.lazy(start, end) if h.compiled.rule.kind == "frame"]
    below = None if frames else stack_below(ctx.doc, line.number)
    if below is not None:  # the failure heads its own stack: IPython's header, a fatal error's dump
        start, end = below[0], below[1]
        frames = [h for h in ctx.lazy(start, end) if h.compiled.rule.kind == "frame"]
        if below[2]:
            frames.reverse()  # listed innermost first
    clues = _frame_clues(frames, line.source, "frame", "inner_frame", neutral)
    if not any(c.kind == "frame" for c in clues):
        known = ctx.table_frame(start, end, line.source)
        if known is not None:
            kind: ClueKind = "construction_frame" if known[0] == "init" else "table_frame"
            if kind == "table_frame":
                clues = []  # vLLM's call graph names the stage: a stage-neutral library's frame says less
            clues.append(Clue(kind, known[0], f"traceback frame {known[1]}", known[2]))
    clues += _timeline_clues(ctx, line)
    # a pasted command or an engine constructor says the run started, not how far it got: what
    # was printed after the failure may still say where
    if all(c.stage in _STARTED for c in clues):
        after = [
            h
            for h in ctx.lazy(line.number + 1, line.number + _AFTER_WINDOW)
            if h.compiled.rule.kind == "frame"
        ]
        if after:
            clues += _frame_clues(after, after[0].line.source, "frame_after", "inner_frame", neutral)
        if all(c.stage in _STARTED for c in clues):  # the frames after it, as vLLM's call graph places them
            known = ctx.table_frame(line.number + 1, line.number + _AFTER_WINDOW, line.source)
            if known is not None:
                kind = "construction_frame" if known[0] == "init" else "frame_after"
                clues.append(Clue(kind, known[0], f"traceback frame {known[1]} after it", known[2]))
    strong = any(
        c.kind in ("frame", "table_frame", "marker", "frame_after") and c.stage not in _STARTED for c in clues
    )
    # the failing process's own traceback outweighs every position-free sign together (0.92 against
    # at most 1 - 0.5 x 0.55 x 0.58 = 0.84), so with one those are not read: a paste with a
    # traceback, the usual case, costs no extra whole-text pass
    if not any(c.kind in ("frame", "table_frame") for c in clues):
        for stage, basis, number in ctx.signs():
            clues.append(Clue("wrapper" if number is not None else "message_sign", stage, basis, number))
        for stage, basis, number in ctx.prose_stages():
            clues.append(Clue("prose", stage, basis, number))
        # a fix the person says worked, or did not: for a phase their words already place the
        # failure in, the same person's belief told twice, not a second witness
        told = {STAGE_PHASE[c.stage] for c in clues if c.kind == "prose"}
        clues += [c for c in ctx.remedies() if c.against or STAGE_PHASE[c.stage] not in told]
    if not strong:
        after_clue = _marker_after(ctx, line.number, _printed_in_log(ctx.doc, line), line.source)
        if after_clue is not None:
            clues.append(after_clue)
    # the person's other sentences are read only when no frame, marker or sentence of theirs about
    # the failure speaks (each of those outweighs them): a log with a timeline costs no extra pass
    if not strong and not any(c.kind in ("table_frame", "prose") for c in clues):
        doing = _latest_said(ctx.stages_said(), is_prose(line))
        if doing is not None:
            clues.append(doing)
    clues = _refine_construction(clues)
    if not strong:  # the arithmetic of what the paste names, read against the clues gathered so far
        reading = hint()
        if reading is not None:
            clues += budget_clues(reading, clues)
    if not clues and default in _PHASE_STAGE:
        clues.append(Clue("rule", _PHASE_STAGE[default], "no context around it"))
    return clues


def _before_serving(clues: list[Clue]) -> bool | None:
    """Whether the clues say the failure came before serving (True), while serving (False), or
    neither or both (None)."""
    said = {c.stage == "serving" for c in clues if not c.against}
    return None if len(said) != 1 else not said.pop()


def budget_clues(reading: BudgetReading, clues: list[Clue]) -> list[Clue]:
    """The clues the budget's reading gives, beside `clues` (the others gathered for the failure).

    Weights that cannot fit, or a process holding far less than its weights, place the failure in
    loading. Weights with room for a KV pool say it was not loading but the profiling run, where the
    other clues say only that it failed at start-up; weights and KV pool held say the pool was
    allocated: warm-up or serving, as the other clues say. The allocator's measurement outranks the
    estimate: with one, the estimate's reading is not added.
    """
    basis, before = reading.basis, _before_serving(clues)
    if reading.held == "below_weights":
        return [Clue("in_use", "loading", f"{basis}: this process held less than its weights")]
    if reading.held == "weights_and_pool":
        held = f"{basis}: this process held its weights and KV cache"
        found = [Clue("in_use", s, held, against=True) for s in ("loading", "kv_cache")]
        if before is not None:
            found.append(Clue("in_use", "warmup" if before else "serving", held))
        return found
    if reading.weights == "exceed" and not _before_loading(clues):
        return [Clue("budget", "loading", basis)]
    if reading.weights == "room" and _vague_startup(clues):
        room = f"{basis}: the weights fit with room"
        return [Clue("budget_room", "loading", room, against=True), Clue("budget_room", "profiling", room)]
    return []


def _before_loading(clues: list[Clue]) -> bool:
    """Whether the clues name a step before any weight loads (the device's set-up: "it fails before
    the weights are loaded"): the run never reached the weights, so that they would not have fit
    says nothing of this failure."""
    named = [c for c in clues if not c.against]
    return (
        bool(named) and any(c.stage == "device" for c in named) and all(c.stage in _NOT_LOADED for c in named)
    )


def _vague_startup(clues: list[Clue]) -> bool:
    """Whether the clues say only that the failure came at start-up, not in which step ("when I
    start it", a pasted command): the estimate's room then says the weights had loaded. A step
    named (the person's "while loading the shards", a marker) is an observation it does not
    overrule."""
    named = [c for c in clues if not c.against]
    return bool(named) and all(c.stage in _STARTED for c in named)


def _printed_in_log(doc: Document, line: Line) -> bool:
    """Whether a failure line is one a program printed inside the pasted log: not a person's sentence
    and not the heading the paste starts with (an issue title)."""
    if is_prose(line):
        return False
    return any(doc.lines[n].strip() for n in range(line.number - 1))


def _latest_said(said: list[tuple[Stage, int, str]], worded: bool = False) -> Clue | None:
    """The furthest stage of a run the person's sentences say they were in (they tell the steps up
    to the failure: "I load the model, then run the benchmark")."""
    named = [s for s in said if s[0] in _ENGINE_STAGES]  # "while launching" names no step
    if not named:
        # only start-up said about a failure said in words ("CUDA OOM. Right at startup, before any
        # request"): start-up's phase, unless the log shows which step (`_refine_construction`); a
        # line a program printed keeps its own rule's phase
        started = next((s for s in said if s[0] in _STARTED), None) if worded else None
        if started is None:
            return None
        return Clue(
            "prose_context",
            started[0],
            f'what the person says they were doing ("{started[2][:80]}")',
            started[1],
        )
    stage, number, text = max(named, key=lambda s: (_PROGRESS[s[0]], -s[1]))
    return Clue("prose_context", stage, f'what the person says they were doing ("{text[:80]}")', number)


def _refine_construction(clues: list[Clue]) -> list[Clue]:
    """A clue that says start-up without saying which stage (an engine-construction frame, a pasted
    command, the person's "when starting it") joins the first other clue naming a start-up stage
    that the log shows (the timeline's marker, a later line or frame), else the person's words."""
    named = [c for c in clues if c.stage not in _STARTED and _PROGRESS[c.stage] < _PROGRESS["serving"]]
    startup = next((c for c in named if c.kind != "prose"), named[0] if named else None)
    if startup is None:
        return clues
    return [
        Clue(c.kind, startup.stage, c.basis, c.line) if c.stage in _STARTED and _joins(c) else c
        for c in clues
    ]


def _joins(clue: Clue) -> bool:
    """Whether a start-up clue takes its stage from the others: a construction frame, the person's
    start-up words and a command line do; a frame inside a configuration check does not."""
    return clue.kind in ("construction_frame", "prose", "marker", "other_marker", "marker_after")


def weigh(clues: list[Clue], weights: EvidenceWeights) -> Placement | None:
    """Combine clues per phase (noisy-OR); None when there are none."""
    support: dict[Phase, float] = {}
    best_clue: dict[Phase, Clue] = {}
    for clue in clues:
        if clue.against:
            continue
        phase = STAGE_PHASE[clue.stage]
        weight = weights.weights[clue.kind] * clue.share
        support[phase] = 1 - (1 - support.get(phase, 0.0)) * (1 - weight)
        held = best_clue.get(phase)
        if held is None or weights.weights[held.kind] * held.share < weight:
            best_clue[phase] = clue
    for clue in clues:  # evidence against a phase shrinks what supports it, and gives no other any
        phase = STAGE_PHASE[clue.stage]
        if clue.against and phase in support:
            support[phase] *= 1 - weights.weights[clue.kind] * clue.share
    if not support:
        return None
    ranked = sorted(support.items(), key=lambda item: -item[1])
    phase, top = ranked[0]
    runner_up = ranked[1][1] if len(ranked) > 1 else 0.0
    confidence = min(weights.ceiling, max(weights.floor, top - weights.contest * runner_up))
    lead = best_clue[phase]
    return Placement(phase, round(confidence, 3), lead.basis, lead.line, tuple(clues))


def place(ctx: StageLookup, failure: Hit, hint: HintFn, weights: EvidenceWeights) -> Placement:
    """Place a bare CUDA OOM in startup order (DESIGN §3.1) from every clue around it."""
    return place_line(ctx, failure.line, failure.compiled.rule.phase, hint, weights)


def place_line(
    ctx: StageLookup, line: Line, default: Phase | None, hint: HintFn, weights: EvidenceWeights
) -> Placement:
    """Place an out-of-memory stated on `line` (a log line, or a person's sentence that says it) from
    every clue around it."""
    placed = weigh(gather(ctx, line, default, hint, weights.neutral_libraries), weights)
    if placed is None:  # a rule without a default phase and no clue at all
        return Placement(default or "warmup_oom", weights.floor, "no context around it")
    return placed
