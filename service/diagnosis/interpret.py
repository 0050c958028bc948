"""From rule hits to a diagnosis: the root phase, its confidence, the facts and the evidence.

The root is the earliest decisive failure in startup order (DESIGN §3.1). Wrappers ("Engine core
initialization failed", EngineDeadError) are never the root. A bare CUDA OOM says nothing about
when it happened; `placement` weighs every clue around it (frames, the process's stage timeline,
wrappers, the person's words, the budget) into a phase and a confidence.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

import msgspec

from service.diagnosis.blocks import code_lines
from service.diagnosis.command import command_lines
from service.diagnosis.fragments import FragmentHit, find_fragments, loudest_printing
from service.diagnosis.frames import (
    CONSTRUCTION,
    ONE_PHASE_STAGES,
    TRACEBACK,
    FramePlace,
    cut_traceback,
    deepest_frame,
)
from service.diagnosis.normalize import Document, Line, is_prose
from service.diagnosis.placement import (
    PLACED_STAGE,
    STAGE_PHASE,
    BudgetReading,
    Clue,
    HintFn,
    HostRoom,
    is_marker,
    place,
    place_line,
    stage_after_end,
    stage_orders,
)
from service.diagnosis.prose import (
    Memory,
    ProseCue,
    cause_said,
    is_negated_prose,
    is_sentence,
    line_memory,
    memory_grew,
    memory_side,
    names_memory_only,
    ran_said,
    read_prose,
    sequel_stage,
    shown_not_run,
    stages_said,
)
from service.diagnosis.remedies import Compared, comparisons_said, remedies_said
from service.diagnosis.retyped import find_retyped
from service.diagnosis.scan import Hit, LineBlocks, present
from service.first_use import first_use_re
from service.packs import SignatureIndex
from service.packs.evidence import EvidenceWeights
from service.packs.fixes import FixPack
from service.packs.fragments import LEVEL_RANK, FragmentIndex, empty_fragments
from service.packs.prose import ProseVocabulary
from service.packs.signatures import CompiledRule, Stage
from service.schemas import Phase

__all__ = ["PHASE_STAGE", "Context", "Verdict", "interpret"]

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
    "host_oom": 2,  # mostly while loading weights into RAM or allocating swap/offload buffers
    "not_memory": 0,
    "no_failure": 9,
}

# When the host ran out, by the phase a CUDA OOM at the same point would have.
_HOST_STAGE: dict[Phase, str] = {
    "startup_budget": "while a worker set up its device, before the weights loaded",
    "weights_oom": "while the weights loaded",
    "kv_cache_capacity": "after the weights loaded and were profiled, while allocating the KV cache and swap",
    "warmup_oom": "after the weights loaded, while profiling or warming up",
    "runtime_oom": "while serving",
}

# The steps of start-up a person can name (start-up itself, `init`, names none)
_STEPS: frozenset[Stage] = frozenset({"loading", "profiling", "kv_cache", "warmup"})
# A function's name as a person writes it ("it OOMs in `profile_run`", "fails inside
# determine_available_memory()"): an identifier with an underscore in it, so that an everyday word
# that is also some method's name ("generate", "step") stays a word
_FUNCTION_NAME = first_use_re(
    r"(?<![\w])_*[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?![\w])|(?<![\w])_+[A-Za-z]\w*"
)
MAX_PLACED_OOMS = 16
# A message retyped in a person's shorthand counts as this share of a fragment showing as many of
# its words: its numbers stand in the template's holes, but its words are the person's.
RETYPED_STRENGTH = 0.8
_PROSE_ONLY = 0.5  # the most a verdict resting on a person's sentence alone may claim


class Verdict(msgspec.Struct):
    """The root phase, how sure, the hit that decided it and why, and the phase of every candidate."""

    phase: Phase
    confidence: float
    root: Hit | None
    basis: str
    decisive: list[Hit] = msgspec.field(default_factory=list)
    first_exception: Hit | None = None
    hit_phases: dict[tuple[int, str], Phase] = msgspec.field(default_factory=dict)
    taken_back: frozenset[int] = frozenset()  # lines of sentences saying a failure is gone or avoided
    retold: bool = False  # a vLLM message the person retells in a sentence of their own words


# The call graph's stages (rules/frames/) as placement's stages: an OOM while allocating the KV
# cache it sized has no memory for cache blocks (kv_cache_capacity, DESIGN §3.1).
_TABLE_STAGE: dict[str, Stage] = {
    "init": "init",
    "device": "device",
    "loading": "loading",
    "profiling": "profiling",
    "warmup": "warmup",
    "kv_cache": "kv_cache",
    "serving": "serving",
}


class Context:
    """The document, its eager hits, lazy stage/frame lookups by line range (cached), and the weights
    placement gives each kind of clue."""

    def __init__(
        self,
        doc: Document,
        signatures: SignatureIndex,
        hits: list[Hit],
        weights: EvidenceWeights,
        prose: ProseVocabulary,
        fragments: FragmentIndex | None = None,
        copies: tuple[tuple[int, int], ...] = (),
        fixes: FixPack | None = None,
        host_room: Callable[[], HostRoom | None] | None = None,
    ) -> None:
        self.doc = doc
        # what a host memory limit the paste states says (service/diagnosis/host_limit.py), asked once
        self.host_room = host_room
        self.fragments = fragments or empty_fragments()
        self.signatures = signatures
        self.hits = hits
        self.weights = weights
        self.prose = prose
        self.copies = copies  # the eager scan's repeated lines, which whole-text passes skip
        self.fixes = fixes  # the fix recipes: which phases a fix the person says worked serves
        self._remedies: list[Clue] | None = None
        self._compared: list[Compared] | None = None
        self._cues: list[ProseCue] | None = None
        self._prose_stages: list[tuple[Stage, str, int]] | None = None
        self._side: Memory | None = None
        self._said: list[tuple[Stage, int, str]] | None = None
        self._lazy = LineBlocks(doc, signatures.lazy)
        self._present: list[CompiledRule] | None = None
        self._signs: list[tuple[Stage, str, int | None]] | None = None
        # in line order, as the scan found them; a marker's wording in pasted code marks no stage
        self._shown = code_lines(doc)
        self._eager_markers = [h for h in hits if is_marker(h) and h.line.number not in self._shown]
        self._eager_marker_lines = [h.line.number for h in self._eager_markers]
        self._eager_by_source: dict[str, list[int]] = {}
        for marker in self._eager_markers:
            self._eager_by_source.setdefault(marker.line.source, []).append(marker.line.number)

    def table_frame(self, first: int, last: int, source: str) -> tuple[Stage, str, int] | None:
        """The innermost frame on lines first..last (of process `source`; a failure without a process
        prefix owns every frame) that vLLM's call graph places in one stage."""
        known = deepest_frame(self.doc, self.signatures.frames, first, last, source=source or None)
        if known is None or known.stage not in _TABLE_STAGE:
            return None
        return _TABLE_STAGE[known.stage], known.function, known.line

    def fragment_hits(self, skip: set[int]) -> list[FragmentHit]:
        """Lines (not in `skip`) showing part of a decisive vLLM template without its rule matching,
        or retyping one with its numbers (weaker: `RETYPED_STRENGTH` of the share of words seen)."""
        found = find_fragments(self.doc, self.fragments, self.signatures.by_id, skip)
        # a line some rule read is vLLM's (or a wrapper's) own wording, not a person's retyping;
        # the generic exception rule reads only its class, which a retyped raise opens with
        read = {h.line.number for h in self.hits if not _generic_exception(h)}
        retyped = find_retyped(self.doc, self.fragments, self.signatures.by_id, skip | read)
        # a line showing a fragment of a template and retyping one with its numbers: the fragment's
        # share of words is the evidence; the retyping, which also aligns the numbers with the
        # holes, says which template it is where it shows more of its words (`Free memory on
        # device` is not the CPU backend's `Available memory on node`), and reads the numbers the
        # fragment's holes did not place (words between them dropped)
        by_line = {f.hit.line.number: i for i, f in enumerate(found)}
        for r in retyped:
            at = by_line.get(r.hit.line.number)
            if at is None:
                found.append(FragmentHit(r.hit, round(r.seen * RETYPED_STRENGTH, 3), r.covered))
                continue
            shown = found[at]
            if shown.hit.rule_id != r.hit.rule_id and r.seen > shown.seen:
                found[at] = FragmentHit(r.hit, shown.seen, shown.covered)
            elif shown.hit.rule_id == r.hit.rule_id and r.hit.facts.keys() - shown.hit.facts.keys():
                facts = {**r.hit.facts, **shown.hit.facts}
                hit = Hit(shown.hit.compiled, shown.hit.line, facts, shown.hit.repeats)
                found[at] = FragmentHit(hit, shown.seen, shown.covered)
        return sorted(found, key=lambda f: f.hit.line.number)

    def present(self) -> list[CompiledRule]:
        """Lazy-index rules matching anywhere in the document (one RE2 pass, cached)."""
        if self._present is None:
            self._present = present(self.doc, self.signatures.lazy, self.copies)
        return self._present

    def signs(self) -> list[tuple[Stage, str, int | None]]:
        """Position-free signs of a stage: a wrapper only that stage prints (a worker failing in its
        constructor, a dead engine), once per stage, and `anywhere` stage rules found in the text
        (cached: every OOM placed asks)."""
        if self._signs is None:
            self._signs = self._find_signs()
        return self._signs

    def _find_signs(self) -> list[tuple[Stage, str, int | None]]:
        found: list[tuple[Stage, str, int | None]] = []
        seen: set[Stage] = set()
        for hit in self.hits:
            stage = hit.compiled.rule.stage
            if hit.compiled.rule.kind == "wrapper" and stage is not None and stage not in seen:
                seen.add(stage)
                found.append((stage, _basis(hit.compiled.rule.title), hit.line.number))
        for compiled in self.present():
            stage = compiled.rule.stage
            if compiled.rule.anywhere and stage is not None:
                found.append((stage, _basis(compiled.rule.title), None))
        return found

    def prose_cues(self) -> list[ProseCue]:
        """The person's sentences that say something failed (cached)."""
        if self._cues is None:
            cues = read_prose(self.doc, self.prose)
            away = shown_not_run(self.doc, self.prose) if cues else frozenset()
            self._cues = [c for c in cues if c.line not in away]  # a diff's code, a supposed block
        return self._cues

    def memory_side(self) -> Memory:
        """Whose memory the person's words are about as a whole (cached)."""
        if self._side is None:
            self._side = memory_side(self.doc, self.prose, self.host_room() if self.host_room else None)
        return self._side

    def ran_out(self, cue: ProseCue) -> Memory:
        """Whose memory a sentence says ran out; one that does not say takes the side of the rest of
        the person's words."""
        return cue.memory if cue.memory not in (None, "unstated") else self.memory_side()

    def prose_stages(self) -> list[tuple[Stage, str, int]]:
        """The person's words about when it fails, once per stage (cached: every OOM placed asks,
        and a dense paste has hundreds of sentences to follow back)."""
        if self._prose_stages is None:
            found: dict[Stage, tuple[Stage, str, int]] = {}
            told: dict[Stage, set[int]] = {}  # the lines naming each stage
            for cue in self.prose_cues():
                # "then I got OOM" names no stage of its own: it follows the sentence before it
                # (a variant run's failure, told under a condition, names none of the reported run)
                stage = cue.stage or (None if cue.variant else sequel_stage(cue, self.doc, self.prose))
                if stage is not None:
                    told.setdefault(stage, set()).add(cue.line)
                if stage is not None and stage not in found:
                    found[stage] = (stage, f'the person\'s words ("{cue.text[:80]}")', cue.line)
            if told.get("serving") == {_title_line(self.doc)} and _STEPS.intersection(found):
                # a title names its topic loosely ("multi images inference meets OOM"): a step of
                # start-up the person's sentences name for the failure says when, and a run that
                # failed there never served
                del found["serving"]
            if not found:
                # words naming no stage may name a vLLM function: its stage by vLLM's call graph (a
                # function named beside a stage's words is as often the cause's place as the failure's)
                named = ((self.function_stage(c.text), c) for c in self.prose_cues())
                first = next(((stage, c) for stage, c in named if stage is not None), None)
                if first is not None:
                    stage, cue = first
                    found[stage] = (stage, f'the person\'s words ("{cue.text[:80]}")', cue.line)
            self._prose_stages = list(found.values())
        return list(self._prose_stages)

    def remedies(self) -> list[Clue]:
        """A fix the person says worked (for the stages its recipes serve) or changed nothing
        (against them), as clues (cached; none without the fix recipes)."""
        if self._remedies is None:
            said = remedies_said(self.doc, self.prose, self.fixes) if self.fixes is not None else []
            told = {r.line for r in said}  # a comparison on a line read as a fix already is that fix
            compared = [c for c in self.compared() if c.line not in told and c.line not in self._shown]
            self._remedies = [
                Clue(
                    "remedy",
                    PLACED_STAGE[phase],
                    f'the person\'s comparison ("{c.text[:80]}")',
                    c.line,
                    share=share,
                )
                for c in compared
                for phase, share in c.placed
            ] + [
                Clue(
                    "remedy" if r.worked else "remedy_failed",
                    PLACED_STAGE[phase],
                    f'the person\'s words on a fix ("{r.text[:80]}")',
                    r.line,
                    share=share,
                    against=not r.worked,
                )
                for r in said
                if r.line not in self._shown
                for phase, share in r.shares
            ]
        return self._remedies

    def compared(self) -> list[Compared]:
        """The person's comparisons of a run that works with one that fails (cached; none without
        the fix recipes)."""
        if self._compared is None:
            self._compared = (
                comparisons_said(self.doc, self.prose, self.fixes) if self.fixes is not None else []
            )
        return self._compared

    def function_stage(self, text: str) -> Stage | None:
        """The stage of the vLLM functions a person's clause names, by vLLM's call graph (the frame
        table, rules/frames/), when every function of each name it names is in one stage and they
        all agree; None when it names none, or names disagree."""
        stages: set[Stage] = set()
        for name in _FUNCTION_NAME.findall(text):
            found = {row.stage for row in self.signatures.frames.rows_named(name)}
            if len(found) == 1 and (stage := next(iter(found))) in _TABLE_STAGE:
                stages.add(_TABLE_STAGE[stage])
        return stages.pop() if len(stages) == 1 else None

    def stages_said(self) -> list[tuple[Stage, int, str]]:
        """What the person says they were doing, stage by stage, in any of their sentences (cached)."""
        if self._said is None:  # a line of pasted code is nobody's sentence
            self._said = [said for said in stages_said(self.doc, self.prose) if said[1] not in self._shown]
        return self._said

    def lazy(self, first: int, last: int) -> list[Hit]:
        """Stage-marker and frame hits on lines first..last (each line scanned at most once); none
        without a line scan when no lazy rule matches anywhere (the one whole-text pass `present`)."""
        return self._lazy.hits(first, last) if self.present() else []

    def markers(self, first: int, last: int) -> list[Hit]:
        """Stage markers on lines first..last in line order: lazy stage lines and eager markers."""
        found = [
            h
            for h in self.lazy(first, last)
            if h.compiled.rule.kind == "stage" and h.line.number not in self._shown
        ]
        lines = self._eager_marker_lines
        found += self._eager_markers[bisect_left(lines, first) : bisect_right(lines, last)]
        return sorted(found, key=lambda h: h.line.number)

    def eager_marker_before(self, before: int, source: str) -> int:
        """Line of process `source`'s (any process's when empty) last eager marker before `before`, or 1."""
        lines = self._eager_by_source.get(source, []) if source else self._eager_marker_lines
        at = bisect_left(lines, before)
        return lines[at - 1] if at else 1


def _title_line(doc: Document) -> int:
    """The number of a paste's first line with text: an issue's or a post's title, when it has one."""
    return next((n for n, text in enumerate(doc.lines, 1) if text.strip()), 0)


def _generic_exception(hit: Hit) -> bool:
    """Whether a hit is the generic exception rule's: an exception line whose message is unknown."""
    return hit.compiled.rule.kind == "exception" and hit.compiled.rule.phase is None


def _basis(title: str) -> str:
    """A rule title as the basis of a verdict: 'Worker failed (V0)' -> 'worker failed'."""
    text = title.split(" (")[0]
    return f"{text[0].lower()}{text[1:]}" if text else text


def _host_said(ctx: Context, hit: Hit) -> bool:
    """Whether an OOM hit's line says the host's memory ran out: its own words name host memory, or
    it is a person's line (no program's prefix) that names no side, as a title's bare "OOM problem"
    does, in a post whose words speak of host RAM only."""
    side = line_memory(hit.line.text, ctx.prose)
    if side == "unstated" and not hit.line.source and not hit.line.level:
        return ctx.memory_side() == "host"
    return side == "host"


def _decisive_phase(ctx: Context, hit: Hit, hint: HintFn) -> tuple[Phase, float, str]:
    rule = hit.compiled.rule
    if rule.kind == "oom" and _host_said(ctx, hit):
        # the line itself says the host's memory ran out ("Ray OOM prevention kills vLLM actors…",
        # "killed by the OOM killer"): host_oom, placed in the stage where it happened
        placement = place_line(ctx, hit.line, None, _no_hint, ctx.weights)
        confidence = _PROSE_ONLY if rule.severity != "error" else placement.confidence
        basis = "its own words name host memory"
        if placement.clues:
            basis += f"; {_HOST_STAGE[placement.phase]}, going by the {placement.basis}"
        return "host_oom", confidence, basis
    if rule.kind == "oom":
        placement = place(ctx, hit, hint, ctx.weights)
        return placement.phase, placement.confidence, placement.basis
    assert rule.phase is not None
    if rule.phase == "host_oom":  # placed in the stage where it happened, as a CUDA OOM is (DESIGN §3.1)
        # the kernel's or the kubelet's word in a person's sentence ("the pod is OOMKilled") is what
        # they say, as sure as words can make it, not the line the system printed
        sure = _PROSE_ONLY if is_sentence(hit.line) else 0.95
        placement = place_line(ctx, hit.line, None, _no_hint, ctx.weights)
        if placement.clues:
            stage = _HOST_STAGE[placement.phase]
            return rule.phase, sure, f"its own message; {stage}, going by the {placement.basis}"
        return rule.phase, sure, "its own message"
    return rule.phase, 0.95, "its own message"


def _severity(ctx: Context, hit: Hit) -> str:
    """The hit's severity by how vLLM prints the message its line shows: a rule that matches both a
    raised message and one vLLM only logs as a warning (the placement group's "number of required
    GPUs exceeds", which waits; V0's scheduler ignoring a prompt) is a warning where the line is the
    warning's printing (in the era its logger prefix shows, when the wording's level changed), so an
    error elsewhere comes first (`printed_at`, the inventory's levels)."""
    severity = hit.compiled.rule.severity
    if severity == "error":
        loudest = loudest_printing(hit.line, ctx.fragments.printed_at(hit.rule_id, hit.line.text))
        if loudest is not None and loudest < LEVEL_RANK["error"]:
            return "warning"
    return severity


def _no_hint() -> BudgetReading | None:
    return None


def _said_host_oom(ctx: Context, number: int) -> bool:
    """Whether the person's sentence on line `number` says the host's RAM ran out, not the GPU's."""
    cues = [c for c in ctx.prose_cues() if c.line == number and c.memory is not None]
    if cues:
        return any(ctx.ran_out(c) == "host" for c in cues)
    side = line_memory(ctx.doc.line(number).text, ctx.prose)  # a line too marked-up to read as prose
    if side in ("host", "device"):
        return side == "host"
    return ctx.memory_side() == "host"


def _words_verdict(ctx: Context, hint: HintFn) -> Verdict | None:
    """A failure only the person's words state: memory ran out (the host's or the GPU's, placed by
    every clue around the sentence) or one they name by what happened (a prompt too long), never
    more sure than a sentence can make it."""
    stated = [c for c in ctx.prose_cues() if c.memory is not None or c.phase is not None]
    if not stated:
        stated = _grown_out(ctx)
    # a refusal of the layout comes before any memory is used: the root, wherever it is told; a
    # shortfall of memory told by what ran short ("the available KV cache memory is insufficient")
    # is the same failure as a bare "OOM" beside it, told more exactly
    said = next(
        (c for c in stated if c.phase in ctx.prose.refusals),
        next((c for c in stated if c.phase in ctx.prose.memory_phases), stated[0] if stated else None),
    )
    if said is None:
        return None
    quoted = f'the person\'s words only ("{said.text[:80]}")'
    if said.phase is not None:
        return Verdict(said.phase, _PROSE_ONLY, None, quoted)
    if ctx.ran_out(said) == "host":
        return Verdict("host_oom", _PROSE_ONLY, None, f"{quoted}; host RAM ran out")
    placement = place_line(ctx, ctx.doc.line(said.line), "warmup_oom", hint, ctx.weights)
    confidence = min(placement.confidence, _PROSE_ONLY)
    return Verdict(placement.phase, confidence, None, f"{quoted}; {placement.basis}")


def _grown_out(ctx: Context) -> list[ProseCue]:
    """The person's clauses saying the server ended ("但是整个服务会停止", "the server crashes") with no
    word of what failed, read as memory running out when their sentences tell memory growing over
    time ("显存会逐渐增加", "memory keeps climbing"): a leak ends in the memory it grew into."""
    ended = [c for c in ctx.prose_cues() if c.phase is None and ctx.prose.crashed.search(c.text)]
    if not ended or not memory_grew(ctx.doc, ctx.prose):
        return []
    return [msgspec.structs.replace(c, memory="unstated") for c in ended[:1]]


def _shortfall_said(ctx: Context) -> tuple[Phase, str] | None:
    """The phase of a shortfall of memory the person tells by what ran short (`memory_phases`: "the
    available KV cache memory is insufficient for one request"), with its basis: the same failure as
    their bare "OOM" beside it, told more exactly."""
    cue = next((c for c in ctx.prose_cues() if c.phase in ctx.prose.memory_phases), None)
    if cue is None or cue.phase is None:
        return None
    return cue.phase, f'the person\'s words only ("{cue.text[:80]}")'


def _oom_word_only_named(ctx: Context, decisive: list[Hit], said: set[int]) -> frozenset[int]:
    """Lines of sentences whose OOM hit is only a word naming a thing (`naming`: "OOM detection"):
    the person's clauses on the line affirm a failure, and every word of theirs saying memory ran
    out stands in such a name. `said`: the ids of the OOM hits of `decisive` on prose lines."""
    lines = {h.line.number for h in decisive if id(h) in said}
    cued = {c.line for c in ctx.prose_cues() if c.line in lines} if lines else set()
    return frozenset(n for n in cued if names_memory_only(ctx.doc.lines[n - 1], ctx.prose))


def _crash_said(ctx: Context, taken_back: frozenset[int]) -> Verdict | None:
    """A process the person says ended ("vllm always crashes as long as preemption happens"), not for
    lack of memory: beside only warnings of a phase in which serving goes on, an error of another kind,
    as sure as words alone can make it."""
    said = next(
        (c for c in ctx.prose_cues() if c.memory is None and ctx.prose.crashed.search(c.text) is not None),
        None,
    )
    if said is None:
        return None
    basis = f'the person\'s words ("{said.text[:80]}"): it ended beside warnings of a run that goes on'
    return Verdict("not_memory", ctx.weights.weights["stated_failure"], None, basis, taken_back=taken_back)


def _failure_said(ctx: Context) -> Verdict | None:
    """Something the person says failed, crashed or hangs ("failed to set up vllm with the
    7900XTX", "加载模型失败") with no log line showing an error and no word of memory or of a failure
    vLLM has a phase for: an error that is not about GPU memory, as sure as words alone can make it.
    Only a title naming it, with the person's sentences after it saying the run went through ("I
    was able to run it on an A100"), names the thread's subject, not this run's failure: none."""
    cues = ctx.prose_cues()
    said = next(iter(cues), None)
    if said is None:
        return None
    if all(_is_title(ctx.doc, c.line) for c in cues):
        ran = ran_said(ctx.doc, ctx.prose)
        if ran is not None and ran > max(c.line for c in cues):
            return None
    killed = next((c for c in ctx.prose_cues() if ctx.prose.ended.search(c.text)), None)
    if killed is not None and ctx.memory_side() == "host":
        # a process the host ended (被 kill, SIGKILL, a pod evicted) in a post about host RAM: only
        # the host kills for memory, the GPU's allocator raises (DESIGN §3.1)
        quoted = f'the person\'s words only ("{killed.text[:80]}")'
        return Verdict(
            "host_oom", _PROSE_ONLY, None, f"{quoted}; the host ended it, and they speak of host RAM"
        )
    compared = _compared_phase(ctx, said)
    if compared is not None:
        phase, text = compared
        basis = (
            f'the person\'s words only ("{said.text[:80]}"): a run that works beside one that fails '
            f'("{text[:80]}")'
        )
        return Verdict(phase, _PROSE_ONLY, None, basis)
    basis = f'the person\'s words only ("{said.text[:80]}"): something failed, not for lack of memory'
    return Verdict("not_memory", ctx.weights.weights["stated_failure"], None, basis)


def _compared_phase(ctx: Context, said: ProseCue) -> tuple[Phase, str] | None:
    """The phase a comparison of a working and a failing setting names, for a failure the person's
    words state without naming one: the phase its fix recipes serve most; of those tied, the one of
    the stage the failure is told in, then a refusal of the layout (it comes before any memory is
    used), then the earliest in start-up."""
    compared = next(iter(ctx.compared()), None)
    if compared is None:
        return None
    top = compared.phases[0][1]
    tied = [phase for phase, share in compared.phases if share >= top - 1e-9]
    stage = said.stage or next((s for s, _, _ in ctx.prose_stages()), None)
    own = STAGE_PHASE.get(stage) if stage is not None else None
    phase = min(tied, key=lambda p: (p != own, p not in ctx.prose.refusals, PHASE_STAGE[p]))
    return phase, compared.text


def interpret(ctx: Context, hint: HintFn = _no_hint) -> Verdict:
    """Choose the root phase among the hits; `hint` is asked only for an OOM nothing else places.
    A cause the person's words name for the chosen failure's symptom (two instances started
    together behind "No available memory for the cache blocks") refines it."""
    verdict = _choose(ctx, hint)
    said = cause_said(ctx.doc, ctx.prose, verdict.phase)
    if said is None:
        return verdict
    cause, _, text = said
    symptom = verdict.phase
    verdict.phase = cause
    verdict.confidence = min(verdict.confidence, ctx.weights.weights["cause_words"])
    verdict.basis = f'{verdict.basis}; the person\'s words name its cause ("{text[:80]}")'
    verdict.hit_phases = {key: cause if p == symptom else p for key, p in verdict.hit_phases.items()}
    return verdict


def _choose(ctx: Context, hint: HintFn) -> Verdict:
    hits = ctx.hits
    candidates: list[tuple[int, int, int, Phase, float, str, Hit]] = []
    wrapped = {h.line.number for h in hits if h.compiled.rule.kind == "wrapper"}
    decisive = [h for h in hits if h.compiled.rule.kind in ("failure", "oom")]
    if any(h.line.number not in wrapped for h in decisive):
        # a wrapper quoting the root message ("Worker failed with error 'CUDA out of memory…'") is
        # only a copy of it; the original line decides
        decisive = [h for h in decisive if h.line.number not in wrapped]
    # the person's words never decide alone: a sentence saying the failure is gone or avoided is
    # no failure, and one that affirms a bare OOM counts only when no log line shows a failure
    # (a specific vLLM wording inside a sentence is a quoted message, not the person's words)
    # nor did a line the paste shows as not of this run: source code in a diff, a block the person
    # introduces as only supposed ("you may see the following error:")
    away = shown_not_run(ctx.doc, ctx.prose) if hits else frozenset()
    explained_kill = _explained_by_earlier(hits, decisive)
    taken_back = (
        frozenset(
            h.line.number
            for h in decisive
            if h.line.number in away or is_negated_prose(ctx.doc, h.line.number, ctx.prose)
        )
        | explained_kill
    )
    decisive = [h for h in decisive if h.line.number not in taken_back]
    # a bare OOM word in a sentence the words channel reads as a failure of another kind ("the crash
    # turned out to be a divide-by-zero, invisible to dmesg OOM detection"): the word names a thing
    # (which OOM hits are on prose lines is read once: `is_prose` runs several patterns a line)
    said = {id(h) for h in decisive if h.compiled.rule.kind == "oom" and is_prose(h.line)}
    unsaid = _oom_word_only_named(ctx, decisive, said)
    if unsaid:
        taken_back |= unsaid
        decisive = [h for h in decisive if h.line.number not in unsaid]
    # by hit, not by line: a program's own wording (Ray's "how to address the out of memory issue"
    # advice) on a line that also reads as a sentence still decides, only the bare OOM word is said
    # (`said` may still name hits just dropped: only those kept are looked up in it)
    if any(id(h) not in said for h in decisive):
        decisive = [h for h in decisive if id(h) not in said]
    ooms = [h for h in decisive if h.compiled.rule.kind == "oom"]
    if len(ooms) > MAX_PLACED_OOMS:  # every rank and request may repeat it; the first ones decide
        extra = {id(h) for h in ooms[MAX_PLACED_OOMS:]}
        decisive = [h for h in decisive if id(h) not in extra]
    on_line: dict[int, list[Hit]] = {}  # the hits of each line an OOM is on, in scan order
    oom_lines = {h.line.number for h in decisive if h.compiled.rule.kind == "oom"}
    for hit in hits:
        if hit.line.number in oom_lines:
            on_line.setdefault(hit.line.number, []).append(hit)
    for hit in decisive:
        phase, confidence, basis = _decisive_phase(ctx, hit, hint)
        severity_rank = 0 if _severity(ctx, hit) == "error" and not _fits_in_free(on_line, hit) else 1
        candidates.append((severity_rank, PHASE_STAGE[phase], hit.line.number, phase, confidence, basis, hit))
    phases = {(c[6].line.number, c[6].rule_id): c[3] for c in candidates}
    exceptions = [
        h
        for h in hits
        if h.compiled.rule.kind in ("exception", "failure", "oom") and h.line.number not in taken_back
    ]
    first_exception = next((h for h in exceptions if h.compiled.rule.severity == "error"), None)
    if candidates:
        best = min(candidates, key=lambda c: (c[0], c[1], c[2]))
        titled = _titled_error(ctx, hits, taken_back) if best[0] else None
        if titled is not None:
            # only warnings below an error the title names (the preemption warnings of a run whose
            # engine died of the title's `ValueError`): they are what led up to it, not its cause
            return _titled_verdict(ctx, titled, phases, taken_back)
        crash = _crash_said(ctx, taken_back) if best[0] and best[3] in ctx.prose.goes_on else None
        if crash is not None:
            # only warnings of a phase whose serving goes on (preemption) and the person says it crashed
            crash.first_exception = first_exception
            return crash
        _, _, _, phase, confidence, basis, root = best
        decisive = [c[6] for c in candidates if c[3] == phase and c[0] == best[0]]
        if id(root) in said:
            # a person calling it "out of memory" is weaker than a traceback cut inside a function
            # that raises only one phase's errors (the KV-size check reached from initialize_cache)
            framed = _cut_frame_verdict(ctx, _cut_frame(ctx, cut_traceback(ctx.doc)), first_exception)
            if framed is not None:
                framed.taken_back = taken_back
                return framed
            confidence = min(confidence, _PROSE_ONLY)
            exact = _shortfall_said(ctx)
            if exact is not None:
                phase, basis = exact
            elif _said_host_oom(ctx, root.line.number):
                phase, basis = "host_oom", "the person's words only; host RAM ran out"
            else:
                basis = f"the person's words only; {basis}"
        return Verdict(phase, confidence, root, basis, decisive, first_exception, phases, taken_back)
    errors = [
        h
        for h in hits
        if h.compiled.rule.kind == "exception"
        and h.line.number not in wrapped
        and h.line.number not in away
        and h.line.number not in explained_kill
    ]
    erred = any(h.compiled.rule.severity == "error" for h in errors)
    # a pasted command's flags (`--kv-cache-dtype fp8 \`) are settings, not a message retold
    # (and an exception rule that names its phase knows the line's message: no other template's part)
    explained = {
        h.line.number
        for h in hits
        if h.compiled.rule.kind in ("failure", "oom")
        or (h.compiled.rule.kind == "exception" and h.compiled.rule.phase)
    }
    # (code, a diff or help text holds vLLM's wording too: computed here also when nothing matched)
    shown = explained | shown_not_run(ctx.doc, ctx.prose) | command_lines(ctx.doc, hits)
    seen = _from_fragments(ctx, shown, against_error=erred)
    if seen is not None and seen.root is not None and seen.root.compiled.rule.severity != "error":
        titled = _titled_error(ctx, hits, taken_back)
        if titled is not None:  # a warning's retold wording below the error the title names
            return _titled_verdict(ctx, titled, seen.hit_phases, taken_back)
    cut = cut_traceback(ctx.doc)
    known = _cut_frame(ctx, cut)
    cut_weight = ctx.weights.weights["cut_frame"]
    # a message known from part of its template and a traceback cut inside one phase's function
    # speak with the strength the evidence table gives each; the stronger decides
    if (
        seen is not None
        and (known is None or known.phase is None or seen.confidence >= cut_weight)
        and seen.confidence >= _named_error_strength(ctx, errors, {h.line.number for h in seen.decisive})
    ):
        if seen.retold:
            # a refusal the person retells in their own sentence names its phase, never as surely as
            # the line vLLM printed: words alone claim no more than `_PROSE_ONLY`
            seen.confidence = min(seen.confidence, _PROSE_ONLY)
        return seen
    # an exception the paste names (a title's `RuntimeError: CUDA error: an illegal memory access`) is
    # the one its cut traceback stopped before: the functions the frames show only say what it may be
    # (also on a line a wrapper's name shares: `AsyncEngineDeadError / RuntimeError: …`). A header
    # naming only the class of the exception its traceback ends in (IPython's `ValueError
    # Traceback (most recent call last)`) says no more than the frames below it.
    cut_named = (
        _named_error_strength(
            ctx,
            [h for h in hits if h.compiled.rule.kind == "exception" and TRACEBACK not in h.line.text],
            set(),
        )
        > 0
    )
    framed = None if cut_named else _cut_frame_verdict(ctx, known, first_exception)
    if framed is not None:  # the paste stops inside one phase's function
        return framed
    words = _words_verdict(ctx, hint)
    if words is not None and words.phase == "host_oom" and explained_kill:
        # the person's "ran out of RAM" read the `Killed` their paste shows, which vLLM's own kill
        # of its processes printed (`not_after`): the words repeat a sign already explained
        words = None
    if words is not None:
        words.first_exception = first_exception
        words.taken_back = taken_back
        return words
    staged = None if cut_named else _cut_stage_verdict(ctx, cut, first_exception)
    if staged is not None:  # outranks a bare ERROR record and "报错" alike: the frames say where
        staged.taken_back = taken_back
        return staged
    # an error a person's sentence or an issue title names counts below one a log line shows, and
    # a sentence that takes it back ("it no longer fails with …") names none
    stated = {h.line.number for h in errors if is_sentence(h.line) or _is_title(ctx.doc, h.line.number)}
    negated = {n for n in stated if is_negated_prose(ctx.doc, n, ctx.prose)}
    errors = [h for h in errors if h.line.number not in negated]
    named = sorted(
        (h for h in errors if h.compiled.rule.severity == "error"), key=lambda h: h.line.number in stated
    )
    if named:
        root = named[0]
        if root.line.number in stated:
            basis = "an error that is not about GPU memory, named only in words or a title"
            confidence = ctx.weights.weights["stated_error"]
        else:
            basis, confidence = "an error that is not about GPU memory", ctx.weights.weights["error_line"]
        worded = _named_in_words(ctx, root)
        if worded is not None:  # a harness's own exception that says what failed in words
            basis = f"an exception whose own words name it ({_basis(root.compiled.rule.title)})"
            return Verdict(worded, confidence, root, basis, [root], root, taken_back=taken_back | negated)
        return Verdict("not_memory", confidence, root, basis, [root], root, taken_back=taken_back | negated)
    wrappers = [h for h in hits if h.compiled.rule.kind == "wrapper" and h.compiled.rule.severity == "error"]
    if wrappers:
        root = wrappers[0]
        basis = "only a wrapper error; its root cause is not in the excerpt"
        return Verdict("not_memory", 0.35, root, basis, [root], first_exception, taken_back=taken_back)
    if not cut:  # a line logged as an error that its process outlived into a later stage was handled
        errors = [h for h in errors if not _ran_on(ctx, h.line, "not_memory")]
    if errors:  # a traceback or a line logged as an error, with no exception line: still an error
        root = errors[-1] if cut else errors[0]
        basis = "a traceback cut before its exception line" if cut else "a line logged as an error"
        return Verdict("not_memory", 0.4, root, basis, [root], root, taken_back=taken_back)
    failed = _failure_said(ctx)
    if failed is not None:
        failed.first_exception = first_exception
        failed.taken_back = taken_back
        return failed
    if cut is not None:  # frames without a logger's level or an exception line: still an error shown
        basis = "a traceback cut before its exception line, in no stage whose failures are one phase"
        return Verdict("not_memory", 0.4, None, basis, [], first_exception, taken_back=taken_back)
    seen_vllm = any(h.compiled.rule.kind in ("info", "version") for h in hits)
    confidence = 0.9 if seen_vllm else 0.5
    return Verdict("no_failure", confidence, None, "no failure signature", [], None, taken_back=taken_back)


def _explained_by_earlier(hits: list[Hit], decisive: list[Hit]) -> frozenset[int]:
    """The lines of failures that a rule their own names (`not_after`) matched before: another sender
    did what the line alone would blame (vLLM's own kill of its process tree before a `Killed`)."""
    vetoing = {rule for h in decisive for rule in h.compiled.rule.not_after}
    if not vetoing:
        return frozenset()
    first: dict[str, int] = {}
    for hit in hits:
        if hit.rule_id in vetoing and hit.line.number < first.get(hit.rule_id, hit.line.number + 1):
            first[hit.rule_id] = hit.line.number
    return frozenset(
        h.line.number
        for h in decisive
        if any(first.get(rule, h.line.number) < h.line.number for rule in h.compiled.rule.not_after)
    )


# An allocation of at most this share of the memory the GPU still had free (and at least 1 GiB less)
# did not fail for lack of memory: torch's `Tried to allocate 20.00 MiB … of which 66.43 GiB is free`
# is an allocator's or driver's error under the OOM wording (vLLM's cumem pool, a broken context).
_FREE_SHARE = 0.125
_FREE_MARGIN_GIB = 1.0


def _fits_in_free(on_line: dict[int, list[Hit]], oom: Hit) -> bool:
    """Whether an OOM's own line says the request fitted in the GPU's free memory many times over
    (`on_line`: the hits on each OOM's line, in scan order)."""
    if oom.compiled.rule.kind != "oom":
        return False
    facts: dict[str, object] = {}
    for hit in on_line.get(oom.line.number, ()):
        facts.update(hit.facts)
    tried, free = facts.get("tried_to_allocate_gib"), facts.get("free_gib")
    if not isinstance(tried, int | float) or not isinstance(free, int | float):
        return False
    return tried <= free * _FREE_SHARE and free - tried >= _FREE_MARGIN_GIB


def _titled_verdict(
    ctx: Context, titled: Hit, phases: dict[tuple[int, str], Phase], taken_back: frozenset[int]
) -> Verdict:
    basis = (
        f"an error that is not about GPU memory, named in the title ({_basis(titled.compiled.rule.title)})"
    )
    confidence = ctx.weights.weights["stated_error"]
    return Verdict("not_memory", confidence, titled, basis, [titled], titled, phases, taken_back)


def _titled_error(ctx: Context, hits: list[Hit], taken_back: frozenset[int]) -> Hit | None:
    """An error-severity exception on the paste's title line (not a wrapper's, not taken back) that
    names no failure in words, on a title that says nothing of memory ("OOM error: …")."""
    said = {h.line.number for h in hits if h.compiled.rule.kind in ("failure", "oom")}
    for hit in hits:
        rule = hit.compiled.rule
        if rule.kind != "exception" or rule.severity != "error" or hit.line.number in taken_back | said:
            continue
        if _is_title(ctx.doc, hit.line.number) and _named_in_words(ctx, hit) is None:
            return hit
    return None


def _named_in_words(ctx: Context, error: Hit) -> Phase | None:
    """The failure an exception no vLLM rule knows names in words (rules/prose.yaml's `phases`): a
    benchmark harness's `AssertionError: Preemptions detected: 24. KV Cache size likely needs to be
    increased` is preemption however the harness words it."""
    for phase, pattern in ctx.prose.phases:
        if pattern.search(error.line.text):
            return phase
    return None


def _named_error_strength(ctx: Context, errors: list[Hit], explained: set[int]) -> float:
    """How strongly an error the paste names (a log line's, else a title's or a sentence's) speaks:
    a few words of a vLLM message in the person's prose do not outweigh it. The lines the message's
    fragments were found on (`explained`) name that message, not another error."""
    named = [h for h in errors if h.compiled.rule.severity == "error" and h.line.number not in explained]
    named = [h for h in named if not is_negated_prose(ctx.doc, h.line.number, ctx.prose)]
    if not named:
        return 0.0
    weights = ctx.weights.weights
    if any(not is_sentence(h.line) and not _is_title(ctx.doc, h.line.number) for h in named):
        return weights["error_line"]
    return weights["stated_error"]


def _cut_frame(ctx: Context, cut: tuple[int, int, str] | None) -> FramePlace | None:
    """The innermost frame of a traceback the paste cut before its message that vLLM's call graph
    places in a function raising one phase's errors."""
    if cut is None:
        return None
    return deepest_frame(ctx.doc, ctx.signatures.frames, cut[0], cut[1], source=cut[2], with_phase=True)


def _cut_frame_verdict(ctx: Context, known: FramePlace | None, first_exception: Hit | None) -> Verdict | None:
    """The phase of the function a traceback was cut inside, when it raises only one phase's errors."""
    if known is None or known.phase is None:
        return None
    basis = f"a traceback cut inside {known.function}, which only raises {known.phase} errors"
    return Verdict(known.phase, ctx.weights.weights["cut_frame"], None, basis, [], first_exception)


def _cut_stage_verdict(
    ctx: Context, cut: tuple[int, int, str] | None, first_exception: Hit | None
) -> Verdict | None:
    """A traceback cut before its message, placed by the stage of its innermost frame that vLLM's call
    graph places (issue 12 §2), when every failure of that stage is one phase (`ONE_PHASE_STAGES`:
    sizing and allocating the KV cache), as sure as the evidence table's `cut_stage_frame`. (With
    words saying memory ran out, placement reads the same frames as a clue to the stated OOM.)"""
    if cut is None:
        return None
    known = deepest_frame(ctx.doc, ctx.signatures.frames, cut[0], cut[1], source=cut[2] or None)
    if known is None or known.stage == CONSTRUCTION:
        # frames of engine construction only (or none known): the stage the run had reached, when the
        # line before the traceback ends one (the worker's `Available KV cache memory: …`)
        reached = stage_after_end(ctx, cut[0], cut[2])
        after = ONE_PHASE_STAGES.get(reached[0]) if reached is not None else None
        if reached is None or after is None:
            return None
        basis = (
            f"a traceback cut in engine start-up right after line {reached[1].line.number} "
            f"({_basis(reached[1].compiled.rule.title)}), in the {reached[0]} stage"
        )
        return Verdict(after, ctx.weights.weights["cut_after_stage_end"], None, basis, [], first_exception)
    phase = ONE_PHASE_STAGES.get(known.stage)
    if phase is None:
        return None
    basis = f"a traceback cut inside {known.function}, which runs in the {known.stage} stage"
    return Verdict(phase, ctx.weights.weights["cut_stage_frame"], None, basis, [], first_exception)


def _is_title(doc: Document, number: int) -> bool:
    """Whether line `number` is the heading a paste starts with (an issue or message title): the first
    line with text, no logger or process prefix, and a blank line or nothing after it."""
    line = doc.line(number)
    if line.source or line.level or any(doc.lines[n].strip() for n in range(number - 1)):
        return False
    return number == len(doc) or not doc.lines[number].strip()


# Less than this share of a template in a person's sentence is their own vocabulary ("trying to get
# started vllm on ROCm") more than the message retold, when an error line says what failed.
_PROSE_FRAGMENT_SHARE = 0.5
# A sentence whose words are less than this share the template's has words of the person's own
# around the message: a retelling ("the error says my prompt of 9000 tokens is longer than …"), not
# the message cut or lower-cased
_RETOLD_COVER = 0.8
# …and that shows less than this share of the template: with all of its words the message is
# quoted whole (an issue title holding the full message), not retold
_QUOTED_SEEN = 0.9


def _retold(ctx: Context, found: FragmentHit, against_error: bool) -> bool:
    """Whether a fragment is vLLM's message shown or retold, not the person's own vocabulary: a log
    line, a sentence with half of the template or more, or, with no error line in the paste, a
    sentence that is mostly the template's words (a message cut short) or says something failed.
    A question about how a setting works ("max-num-batched-tokens refers to the maximum number of
    tokens…?") or an issue form's boilerplate shares a few words with a template, retelling nothing."""
    line = found.hit.line
    if found.seen >= _PROSE_FRAGMENT_SHARE or not is_sentence(line):
        return True
    if against_error:
        return False
    return found.covered >= _PROSE_FRAGMENT_SHARE or any(c.line == line.number for c in ctx.prose_cues())


def _ran_on(ctx: Context, line: Line, phase: Phase) -> bool:
    """Whether the process that printed `line` (a program's line, not a sentence) went on, by its
    own markers after it, past the stage a failure of `phase` stops a run in and past the stage it
    was in when it printed the line: a fatal message ends its process, so a line the run outlived
    was handled (vLLM's warn-and-continue lines: `Cannot use FA version 2 is not supported …`
    logged at ERROR, then a start-up that loads its weights and captures its graphs)."""
    if phase == "host_oom" or is_sentence(line):
        return False
    printed_in, reached = stage_orders(ctx, line)
    return reached is not None and reached > max(printed_in, PHASE_STAGE[phase])


def _from_fragments(ctx: Context, skip: set[int], *, against_error: bool = False) -> Verdict | None:
    """A vLLM message cut or retold without its head (service/diagnosis/fragments.py): the earliest
    in startup order decides, as strong as the share of its template the line shows; a sentence
    showing a small part of a template retells it only as `_retold` says."""
    found = [
        f
        for f in ctx.fragment_hits(skip)
        if not is_negated_prose(ctx.doc, f.hit.line.number, ctx.prose)
        and _retold(ctx, f, against_error)
        and not _ran_on(ctx, f.hit.line, f.hit.compiled.rule.phase or "not_memory")
    ]
    if not found:
        return None
    best = min(found, key=lambda f: (PHASE_STAGE[f.hit.compiled.rule.phase or "not_memory"], -f.seen))
    phase = best.hit.compiled.rule.phase
    assert phase is not None
    weights = ctx.weights
    full = weights.weights["template_fragment"]
    confidence = round(weights.floor + (full - weights.floor) * best.seen, 3)
    basis = (
        f"{round(best.seen * 100)}% of the words of vLLM's message for {_basis(best.hit.compiled.rule.title)}"
    )
    phases = {(f.hit.line.number, f.hit.rule_id): f.hit.compiled.rule.phase or phase for f in found}
    decisive = [f.hit for f in found if f.hit.compiled.rule.phase == phase]
    retold = is_sentence(best.hit.line) and best.covered < _RETOLD_COVER and best.seen < _QUOTED_SEEN
    return Verdict(phase, confidence, best.hit, basis, decisive, best.hit, phases, retold=retold)
